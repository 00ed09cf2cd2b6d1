"""The JVM tuning of the suite, a pytest plugin (``pytest_plugins`` in tests/conftest.py): one
class-data archive of Spark's classes mapped by every JVM the suite starts, the client compiler
alone for the JVMs started as processes (:data:`JIT`), Spark planned for small batches
(:data:`SMALL_BATCHES`), one compiled PySpark for every Python worker (the Spark home of
:func:`_compiled_spark_home`), and matplotlib's font cache made before any test. None of it
changes what a test checks; all of it is why the suite's ~45 JVMs fit on 2 cores."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

#: The JVMs the suite starts as processes compile with the client compiler only: each lives
#: seconds to a minute, too short for the server compiler's work to pay back on 2 cores (a
#: producer job's run here: 23 s of CPU and 13 s of wall time with both compilers, 11 s and 9 s
#: with C1 alone). The suite's own session keeps both (see ``spark``).
JIT = "-XX:TieredStopAtLevel=1"

#: Every Spark application of the suite plans for the batches it runs, of tens to thousands of
#: rows: no whole-stage code generation and no adaptive execution, each a compile or a second
#: plan per query that such batches never pay back (the session's flow and controller tests: a
#: fifth less CPU, 209 to 168 CPU seconds). Java system properties, which every SparkConf reads:
#: they reach the jobs, the servers and the README's lines as written.
SMALL_BATCHES = "-Dspark.sql.codegen.wholeStage=false -Dspark.sql.adaptive.enabled=false"


def pytest_sessionstart(session: pytest.Session) -> None:
    """Have every JVM of the suite map one class-data archive (AppCDS) of Spark's classes, and
    every Python worker Spark starts import PySpark compiled.

    The suite starts about 45 JVMs (its sessions, spark-submit jobs, the kill -9 trials' processes, YARN containers);
    with the archive a JVM's start and first Delta write take about 10 s instead of 17 s on 2 cores.
    The archive is made once per Spark version, by running the producer job for a few seconds
    (about 50 s), and kept in pytest's cache. ``JDK_JAVA_OPTIONS`` reaches every ``java`` started
    below this process (with :data:`JIT` and :data:`SMALL_BATCHES`); a JVM whose class path the
    archive does not match runs without it. ``SPARK_HOME`` (:func:`_compiled_spark_home`) reaches
    every Spark started below it.
    """
    _font_cache()
    if getattr(session.config, "cache", None) is None:  # -p no:cacheprovider: no place to keep it
        os.environ["JDK_JAVA_OPTIONS"] = SMALL_BATCHES
        return
    import pyspark

    os.environ["SPARK_HOME"] = str(_compiled_spark_home(session.config.cache.mkdir("spark-home")))
    archive = session.config.cache.mkdir("jvm") / f"spark-{pyspark.__version__}-compiled-home.jsa"
    quiet = "-Xlog:cds=off -Xlog:cds+dynamic=off"  # spark-class parses its launcher's stdout
    if not archive.exists():
        _archive_classes(archive.with_suffix(".tmp"), quiet)
        archive.with_suffix(".tmp").rename(archive)
    os.environ["JDK_JAVA_OPTIONS"] = f"-XX:SharedArchiveFile={archive} {quiet} {JIT} {SMALL_BATCHES}"


def _font_cache() -> None:
    """Have matplotlib's font cache made before any test: on a machine without one, the first
    plot lists the system's fonts with ``fc-list``, a process a quick-tier test may not start
    (a fresh machine's ``make check`` failed the plot tests so)."""
    import matplotlib.font_manager  # noqa: F401  (builds the cache once, reads it after)


def _compiled_spark_home(cache: Path) -> Path:
    """A Spark home as the pip-installed one (links to its jars, scripts and files), but for the
    ``python/lib/pyspark.zip`` Spark puts first on its Python workers' path: this one holds every
    module compiled. Python's zip import never writes bytecode, so each Python process Spark
    starts (a streaming data source's runner, one per query; each application's worker daemon)
    would compile PySpark afresh: 0.4 s of CPU each on a quiet machine, 1.5 s on a busy one, a
    few hundred times a run. Made once per PySpark version (10 s) and kept in pytest's cache."""
    import compileall
    import py_compile
    import shutil
    import zipfile

    import pyspark

    installed = Path(pyspark.__file__).parent
    home = cache / pyspark.__version__
    if (home / "python" / "lib" / "pyspark.zip").exists():
        return home
    made = home.with_suffix(".tmp")
    shutil.rmtree(made, ignore_errors=True)
    (made / "python" / "lib").mkdir(parents=True)
    for entry in installed.iterdir():
        if entry.name != "python":
            (made / entry.name).symlink_to(entry)
    for entry in (installed / "python").iterdir():
        if entry.name != "lib":
            (made / "python" / entry.name).symlink_to(entry)
    for entry in (installed / "python" / "lib").iterdir():
        if entry.name != "pyspark.zip":
            (made / "python" / "lib" / entry.name).symlink_to(entry)
    with tempfile.TemporaryDirectory() as sources:
        with zipfile.ZipFile(installed / "python" / "lib" / "pyspark.zip") as original:
            original.extractall(sources)
        compileall.compile_dir(sources, quiet=1, legacy=True,
                               invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
        with zipfile.ZipFile(made / "python" / "lib" / "pyspark.zip", "w", zipfile.ZIP_DEFLATED) as compiled:
            for path in sorted(Path(sources).rglob("*")):
                compiled.write(path, path.relative_to(sources).as_posix())
    made.rename(home)
    return home


def _archive_classes(archive: Path, quiet: str) -> None:
    """Run the producer job for 4 s through spark-submit, whose driver JVM writes the classes it
    loaded to ``archive`` when it exits (spark-submit returns after that)."""
    from support.processes import failure, spark_submit

    with tempfile.TemporaryDirectory() as queue:
        result = spark_submit("producer", "--queue", f"{queue}/q", "--run-seconds", "4", timeout=600,
                              conf={"spark.driver.extraJavaOptions": f"-Xss16m -XX:ArchiveClassesAtExit={archive} {quiet}"})
    if result.returncode != 0:
        raise RuntimeError(f"making the class-data archive failed: {failure(result)}")

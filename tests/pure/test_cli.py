"""The ``spark-flow`` command line on a real home: declare, status, set, stop/start, plot, errors."""

from __future__ import annotations

import pytest

from spark_flow.cli import main


def test_unreachable_storage_is_one_line_naming_the_home_without_secrets(capsys: pytest.CaptureFixture[str]) -> None:
    """A home the CLI cannot reach (here: nothing listens at the S3 endpoint) is one error line that
    names the home and storage's reason, exit status 1, and never shows a key. (deltalake named:
    with auto, a session another test left in this process would be the engine tried.)"""
    home = "s3a://flow/home"
    argv = ["--home", home, "--storage-option", "spark.flow.io=deltalake",
            "--storage-option", "aws_endpoint_url=http://127.0.0.1:1", "--storage-option",
            "allow_http=true", "--storage-option", "aws_access_key_id=tests", "--storage-option",
            "aws_secret_access_key=s3cr3t-Never-Shown", "--storage-option", "aws_region=us-east-1",
            "--storage-option", "max_retries=1", "status"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"spark-flow status: error: cannot use {home}/_spark_flow/")
    assert "deltalake cannot connect to http://127.0.0.1:1; check spark.hadoop.fs.s3a.endpoint" in err
    assert "s3cr3t" not in err and "\x1b" not in err and "Traceback" not in err

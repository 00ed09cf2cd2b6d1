"""Run by spark-submit with the mini cluster's Maven packages in ``spark.jars.packages``: prints
the jars Spark's package resolution fetched (Maven Central, kept in Spark's ivy cache)."""

from pyspark import SparkConf, SparkContext

SparkContext._ensure_initialized()
print("spark.jars=" + SparkConf().get("spark.jars", ""))

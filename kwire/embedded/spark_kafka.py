"""Spark's own Kafka source (``spark.read.format("kafka")``), from Maven Central, for the tests
and benchmarks that run it beside kwire's reader.

    from kwire.embedded.spark_kafka import spark_kafka_jars
    SparkSession.builder.config("spark.jars", ",".join(map(str, spark_kafka_jars())))

``org.apache.spark:spark-sql-kafka-0-10_2.13:<pyspark's version>`` and its runtime dependencies
(spark-token-provider-kafka-0-10, kafka-clients, commons-pool2) are copied with Maven's
dependency plugin into ``$KWIRE_KAFKA_CACHE`` (default ``~/.cache/kwire/kafka``)/
``spark-sql-kafka/<version>`` once, as :func:`kwire.embedded.kafka.kafka_jars` copies Kafka's;
a stamp file marks a complete copy.  Spark's and Hadoop's own jars and the libraries pyspark
already ships (compression codecs, slf4j) are left out: the source's jar must run on exactly
pyspark's classes, which is also why its version is pyspark's (``pyspark.__version__``).  No
Ivy download at session start.  A failed download raises :class:`EmbeddedBrokerError` naming the
Maven command -- never a skip.

    python -m kwire.embedded.spark_kafka        # fetch ahead of a run (make test does)
"""
from __future__ import annotations

import time
from pathlib import Path

from . import EmbeddedBrokerError
from .kafka import cache_root, maven_copy

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>kwire</groupId><artifactId>spark-sql-kafka-jars</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.spark</groupId><artifactId>spark-sql-kafka-0-10_2.13</artifactId><version>{spark}</version></dependency>
  </dependencies>
</project>
"""

# Present in pyspark/jars already (a second copy on the class path could be another version).
_EXCLUDE_GROUPS = ("org.apache.hadoop", "org.scala-lang", "org.slf4j",
                   "org.xerial.snappy", "com.github.luben", "at.yawk.lz4", "org.lz4",
                   "com.google.code.findbugs")


def pyspark_version() -> str:
    import pyspark
    return pyspark.__version__


def spark_kafka_jars(version: str | None = None) -> list[Path]:
    """The jars ``spark.jars`` needs for Spark's Kafka source at ``version`` (default: the
    installed pyspark's); downloaded once."""
    version = version or pyspark_version()
    lib = cache_root() / "spark-sql-kafka" / version
    stamp = lib / ".complete"
    if not stamp.exists():
        _fetch(version, lib)
    jars = sorted(lib.glob("*.jar"))
    if not any(j.name.startswith(f"spark-sql-kafka-0-10_2.13-{version}") for j in jars):
        raise EmbeddedBrokerError(f"{lib} holds no spark-sql-kafka-0-10_2.13-{version}.jar; remove it to fetch again")
    return jars


def _fetch(version: str, lib: Path) -> None:
    shipped = _pyspark_jar_names()
    maven_copy(lib, _POM.format(spark=version), f"spark-sql-kafka-0-10_2.13-{version}.jar",
               what=f"Spark's Kafka source {version}", stamp=f"spark-sql-kafka-0-10_2.13 {version}",
               exclude_groups=_EXCLUDE_GROUPS,
               drop=lambda jar: jar.name in shipped)  # e.g. spark-tags: pyspark has the very same file


def _pyspark_jar_names() -> set[str]:
    import pyspark
    return {p.name for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}


def spark_jars_conf(version: str | None = None) -> str:
    """The value for ``spark.jars``."""
    return ",".join(str(p) for p in spark_kafka_jars(version))


if __name__ == "__main__":  # python -m kwire.embedded.spark_kafka [VERSION]: fetch ahead of a run
    import sys

    v = sys.argv[1] if len(sys.argv) > 1 else None
    t0 = time.monotonic()
    jars = spark_kafka_jars(v)
    print(f"Spark's Kafka source {v or pyspark_version()}: {jars[0].parent} "
          f"({', '.join(j.name for j in jars)}; {time.monotonic() - t0:.1f} s)")

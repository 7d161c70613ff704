"""The recipe of docs/SPARK.md, "Shipping kwire to executors", done as a user does it, on the
standalone cluster (tests/spark_cluster.py) and Apache Kafka.

kwire's wheel is built for this interpreter and installed with its executor-side dependencies
into a fresh venv, which ``venv-pack`` packs into ``env.tar.gz``.  Jobs are submitted with
pyspark's own ``bin/spark-submit``; their executors get no path to this checkout (the workers'
``PYTHONPATH`` is overridden with ``spark.executorEnv.PYTHONPATH``), so whatever kwire they run
comes from the archive:

1. without the archive, the first action over ``read_kafka`` fails at once with
   ExecutorSetupError's message and the recipe (the baseline: the executors really cannot
   import kwire);
2. the recipe's command (``--archives env.tar.gz#environment``,
   ``spark.pyspark.python=./environment/bin/python``, the driver on a Python of its own):
   ``read_kafka`` returns exactly the produced records, read by the executors with the kwire
   and the compiled codec unpacked from the archive; a ``format("kwire")`` stream fails, since
   Spark starts the Data Source's planning Python on the driver with that relative path;
3. the same with the archive also unpacked next to the driver, whose Python is then the
   environment's own: the stream returns exactly the produced records too.

The packed environment is cached in ``~/.cache/kwire/test-env/<key>.tar.gz``, the key a digest
of the wheel's sources (what goes into the wheel), this Python and the dependencies' versions;
the venv with the dependencies and the wheel's build directory are kept beside it, so a new
kwire source state costs a wheel build (the codec is compiled again only when its Cython
sources changed), a reinstall and ``venv-pack``.  Built from nothing it took 227-413 s on the
2-core machine at load 15-21 (wheel 107-235 s, venv 81-134 s, venv-pack 34-44 s; 122 MB);
``<key>.json`` has the figures of the last build.  Dependencies are installed at the versions
this environment has, from pip's cache where it holds them.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from importlib import metadata
from pathlib import Path

import pytest

from .test_spark import create, fill

pytestmark = [pytest.mark.spark]

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("KWIRE_TEST_ENV_CACHE", Path.home() / ".cache" / "kwire" / "test-env"))

# What the executors import: kwire's own dependencies, pyarrow/numpy for its Arrow reader,
# pandas (PySpark's Arrow/pandas workers); at this environment's versions.  Not pyspark: the
# executors' Python workers get Spark's own pyspark.zip on their path.
EXECUTOR_DEPS = ("cramjam", "crc32c", "xxhash", "rich", "pyarrow", "numpy", "pandas")
VENV_PACK = "venv-pack==0.2.0"
_WHEEL_FILES = ("setup.py", "pyproject.toml", "MANIFEST.in", "README.md")
_IGNORE = ("__pycache__", "*.so", "*.c", "*.html", "*.pyc")


def _wheel_sources() -> list[Path]:
    """The files ``pip wheel`` builds kwire from (as tests/test_packaging.py copies them)."""
    files = [ROOT / n for n in _WHEEL_FILES]
    skip = shutil.ignore_patterns(*_IGNORE)
    for dirpath, dirnames, filenames in os.walk(ROOT / "kwire"):
        dirnames[:] = sorted(set(dirnames) - skip(dirpath, dirnames))
        files += [Path(dirpath) / f for f in sorted(set(filenames) - skip(dirpath, filenames))]
    return files


def _pins() -> list[str]:
    return [f"{d}=={metadata.version(d)}" for d in EXECUTOR_DEPS]


def env_key() -> str:
    h = hashlib.sha256()
    for f in _wheel_sources():
        h.update(str(f.relative_to(ROOT)).encode() + b"\0" + f.read_bytes() + b"\0")
    h.update(json.dumps([sys.version, sys.executable, _pins(), VENV_PACK]).encode())
    return h.hexdigest()[:20]


def build_wheel(out: Path) -> Path:
    """kwire's wheel for this interpreter, with this environment's Cython and setuptools, from
    a copy of its sources in the cache (so no build/ or egg-info lands in the checkout).  The
    copy and its build directory are kept: files are copied only when they changed, so setuptools
    compiles the codec again only when its Cython sources did."""
    src = CACHE / "build" / "src"
    wanted = {f.relative_to(ROOT) for f in _wheel_sources()}
    for rel in wanted:
        dest = src / rel
        data = (ROOT / rel).read_bytes()
        if not dest.exists() or dest.read_bytes() != data:
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)  # mtime now: newer than what was built from it
    for old in [*src.glob("kwire/**/*"), *src.glob("build/lib*/kwire/**/*")]:
        rel = old.relative_to(src) if old.is_relative_to(src / "kwire") else Path(*old.relative_to(src).parts[2:])
        if old.is_file() and old.suffix in (".py", ".pyx", ".pxi", ".pxd", ".pyi", ".typed") and rel not in wanted:
            old.unlink()  # a module that is gone from the checkout
    run = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                          "--disable-pip-version-check", "-w", str(out), str(src)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (wheel,) = out.glob("kwire-*.whl")
    return wheel


def packed_env() -> tuple[Path, dict]:
    """``env.tar.gz`` (cached) and how long each step of building it took.

    The venv with the dependencies and venv-pack is kept too (``venv-<digest of python and
    dependencies>``); each new kwire source state reinstalls kwire's wheel there and packs it."""
    key = env_key()
    target, timings = CACHE / f"{key}.tar.gz", CACHE / f"{key}.json"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one builder per machine; the others wait and reuse
        if target.exists() and timings.exists():
            return target, json.loads(timings.read_text())
        took: dict = {"python": sys.version.split()[0], "deps": _pins()}
        with tempfile.TemporaryDirectory(prefix="kwire-test-env-") as tmp:
            tmp = Path(tmp)
            t0 = time.monotonic()
            wheel = build_wheel(tmp)
            took["wheel_s"] = round(time.monotonic() - t0, 1)
            t0 = time.monotonic()
            deps = hashlib.sha256(json.dumps([sys.version, sys.executable, _pins(), VENV_PACK]).encode()).hexdigest()
            env = CACHE / f"venv-{deps[:12]}"
            pip = [str(env / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
            if not (env / "bin" / "venv-pack").exists():
                shutil.rmtree(env, ignore_errors=True)
                for old in CACHE.glob("venv-*"):
                    shutil.rmtree(old, ignore_errors=True)
                subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
                run = subprocess.run([*pip, f"{wheel}[arrow]", *_pins(), VENV_PACK], capture_output=True, text=True)
            else:
                run = subprocess.run([*pip, "--no-deps", "--force-reinstall", str(wheel)], capture_output=True, text=True)
            assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
            took["venv_s"] = round(time.monotonic() - t0, 1)
            t0 = time.monotonic()
            # venv-pack packs the active venv ($VIRTUAL_ENV), else the one -p names
            run = subprocess.run([str(env / "bin" / "venv-pack"), "-p", str(env), "-o", str(tmp / "env.tar.gz"), "-q"],
                                 capture_output=True, text=True)
            assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
            took["pack_s"] = round(time.monotonic() - t0, 1)
            took["size_mb"] = round((tmp / "env.tar.gz").stat().st_size / 1e6, 1)
            shutil.move(tmp / "env.tar.gz", target.with_suffix(".part"))
            os.replace(target.with_suffix(".part"), target)
            timings.write_text(json.dumps(took))
        for old in CACHE.glob("*.tar.gz"):  # one environment per machine: the current sources'
            if old != target:
                old.unlink(missing_ok=True)
                old.with_suffix("").with_suffix(".json").unlink(missing_ok=True)
        return target, took


# The user's job.  argv[1]: JSON with bootstrap, topic, stream (also read the topic as a
# format("kwire") stream), checkout (a path the driver's Python imports kwire from: the user's
# own installation on the driver; None when the driver runs the packed environment).
JOB = textwrap.dedent("""
    import json, sys, time
    t0 = time.monotonic()
    args = json.loads(sys.argv[1])
    if args["checkout"]:
        sys.path.insert(0, args["checkout"])
    from pyspark.sql import SparkSession
    spark = SparkSession.builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    took = {"session": time.monotonic() - t0}
    import kwire, kwire.spark as ks
    from kwire.errors import ExecutorSetupError

    def rows(df):
        return sorted([r.partition, r.offset, bytes(r.key).hex(), bytes(r.value).hex()]
                      for r in df.select("partition", "offset", "key", "value").collect())

    def where(_):
        import sys, kwire, kwire._impl
        yield sys.executable, kwire.__file__, kwire._impl.IMPLEMENTATION

    out = {"driver": [sys.executable, kwire.__file__], "took": took}
    opts = {"kafka.bootstrap.servers": args["bootstrap"], "subscribe": args["topic"]}
    if args["batch"]:
        try:
            out["batch"] = rows(ks.read_kafka(spark, **opts))
            out["executors"] = sorted(set(spark.sparkContext.parallelize(range(4), 4).mapPartitions(where).collect()))
        except ExecutorSetupError as e:  # the check job (spark.kwire.checkExecutors=true)
            out["batch_error"] = str(e)
        except Exception as e:  # a guarded read task's error, through Spark
            out["batch_error"] = " ".join(str(e).split())
        took["batch"] = time.monotonic() - t0
    if args["stream"]:
        try:
            ks.register(spark)
            q = (spark.readStream.format("kwire").options(**opts, startingOffsets="earliest").load()
                 .writeStream.format("memory").queryName("got").trigger(availableNow=True).start())
            q.awaitTermination(300)
            if q.exception() is not None:
                raise q.exception()
            out["stream"] = rows(spark.table("got"))
        except Exception as e:
            out["stream_error"] = "%s: %s" % (type(e).__name__, str(e)[:3000])
        took["stream"] = time.monotonic() - t0
    print("RESULT " + json.dumps(out), flush=True)
    spark.stop()
""")


def spark_submit(cluster, workdir: Path, args: dict, *conf: str, archive: Path | None = None,
                 timeout_s: float = 300) -> tuple[dict, subprocess.CompletedProcess]:
    """``spark-submit [--archives archive#environment] --conf ... job.py`` in ``workdir`` on the
    cluster, its executors without this checkout; the job's RESULT and the process."""
    import pyspark

    submit = Path(pyspark.__file__).resolve().parent / "bin" / "spark-submit"
    job = workdir / "job.py"
    job.write_text(JOB)
    base = cluster.driver_conf()
    # The workers run with this checkout on PYTHONPATH (tests/spark_cluster.py): the executors
    # of these jobs get an empty one instead, and no checkout anywhere else.
    base["spark.executorEnv.PYTHONPATH"] = ""
    del base["spark.pyspark.python"]
    cmd = [str(submit), "--master", cluster.master_url]
    for k, v in base.items():
        cmd += ["--conf", f"{k}={v}"]
    if archive is not None:
        cmd += ["--archives", f"{archive}#environment"]
    for c in conf:
        cmd += ["--conf", c]
    cmd += [str(job), json.dumps(args)]
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "KWIRE_SPARK_LOG_LEVEL")
           and not k.startswith("SPARK_")}
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    run = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout_s)
    results = [line[len("RESULT "):] for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    assert run.returncode == 0 and results, f"exit {run.returncode}\n{run.stdout[-2000:]}\n{run.stderr[-5000:]}"
    cluster.wait_idle()
    return json.loads(results[-1]), run


@pytest.fixture(scope="module")
def env_tar(tmp_path_factory):
    path, took = packed_env()
    print(f"\nkwire: packed environment {path.name}: {took}", file=sys.stderr)
    local = tmp_path_factory.mktemp("shipping") / "env.tar.gz"  # the name the jobs give it
    local.symlink_to(path)
    return local


# The steps of the recipe this test does, as docs/SPARK.md and ExecutorSetupError spell them.
RECIPE = ("env/bin/venv-pack -p env -o env.tar.gz", "--archives env.tar.gz#environment",
          "spark.pyspark.python=./environment/bin/python")


def test_the_documented_recipe_is_the_tested_one():
    doc = (ROOT / "docs" / "SPARK.md").read_text()
    section = doc[doc.index("## Shipping kwire to executors"):]
    section = section[:section.index("\n## ", 3)]
    for step in (*RECIPE, "env/bin/pip install 'kwire[arrow]' 'pandas>=2.2,<3' venv-pack",
                 "mkdir environment && tar -xzf env.tar.gz -C environment",
                 'Cannot run program "./environment/bin/python"'):
        assert step in section, step


def _produced(topic: str, partitions: int, per_partition: int) -> list:
    return sorted([p, i, (b"k%d" % i).hex(), (b"%d-%d" % (p, i)).hex()]
                  for p in range(partitions) for i in range(per_partition))


def test_the_shipping_recipe_on_a_standalone_cluster(spark_cluster, kafka, unique_topic, env_tar, tmp_path):
    create(kafka, unique_topic, 2)
    fill(kafka, unique_topic, 2, 200)
    want = _produced(unique_topic, 2, 200)
    args = {"bootstrap": kafka.bootstrap, "topic": unique_topic, "checkout": str(ROOT), "batch": True, "stream": False}
    driver_python = f"spark.pyspark.driver.python={sys.executable}"
    timings, inside = {}, {}

    # 1. Without the archive the executors (this interpreter, no checkout) cannot import kwire:
    #    the first action over read_kafka's DataFrame fails at once (its guarded read tasks, no
    #    minute of retries), with the recipe.
    plain = tmp_path / "plain"
    plain.mkdir()
    t0 = time.monotonic()
    got, _ = spark_submit(spark_cluster, plain, args, f"spark.pyspark.python={sys.executable}", driver_python)
    timings["no archive"] = time.monotonic() - t0
    assert "batch" not in got, got
    err = got["batch_error"]
    assert "ExecutorSetupError: kwire cannot be imported on the executors" in err, err
    assert "No module named 'kwire'" in err and got["took"]["batch"] - got["took"]["session"] < 60, got["took"]
    for step in RECIPE:  # the recipe in the message is the one done below
        assert step in err, step

    # 2. The recipe's spark-submit: batch reads work; the Data Source's planning Python is
    #    ./environment/bin/python on the driver too, where nothing was unpacked.
    recipe = tmp_path / "recipe"
    recipe.mkdir()
    t0 = time.monotonic()
    got, _ = spark_submit(spark_cluster, recipe, {**args, "stream": True}, "spark.pyspark.python=./environment/bin/python",
                          driver_python, archive=env_tar)
    timings["recipe"] = time.monotonic() - t0
    assert got.get("batch") == want, got.get("batch_error") or len(got.get("batch", ()))
    assert got["driver"] == [sys.executable, str(ROOT / "kwire" / "__init__.py")]
    assert len(got["executors"]) >= 1
    for exe, kwire_file, impl in got["executors"]:
        # the executors' Python and kwire are those unpacked in their working directory
        assert exe.endswith("/environment/bin/python") and "/app-" in exe, exe
        assert kwire_file.startswith(exe[:-len("bin/python")] + "lib/python"), (exe, kwire_file)
        assert "site-packages/kwire/__init__.py" in kwire_file and impl == "cython"
    assert "stream" not in got
    assert 'Cannot run program "./environment/bin/python"' in got["stream_error"], got["stream_error"]
    inside["recipe"] = got["took"]

    # 3. Unpacked next to the driver as well (the driver's Python is then the environment's):
    #    the format("kwire") stream plans and reads, exactly.
    unpacked = tmp_path / "unpacked"
    (unpacked / "environment").mkdir(parents=True)
    subprocess.run(["tar", "-xzf", str(env_tar), "-C", "environment"], cwd=unpacked, check=True)
    t0 = time.monotonic()
    got, _ = spark_submit(spark_cluster, unpacked, {**args, "batch": False, "stream": True, "checkout": None},
                          "spark.pyspark.python=./environment/bin/python", archive=env_tar)
    timings["unpacked"] = time.monotonic() - t0
    inside["unpacked"] = got["took"]
    assert got["driver"][0] == str(unpacked / "environment" / "bin" / "python") or \
        got["driver"][0].endswith("environment/bin/python"), got["driver"]
    assert "/environment/lib/python" in got["driver"][1], got["driver"]
    assert got.get("stream") == want, got.get("stream_error") or len(got.get("stream", ()))
    print("kwire: spark-submit runs took " + ", ".join(f"{k} {v:.0f} s" for k, v in timings.items())
          + f"; inside the jobs (s since start): {inside}", file=sys.stderr)



_PROBE_IN_A_FRESH_WORKER = r"""
import json, sys
import pyarrow as pa
from kwire.spark.executors import _probe
ids = pa.RecordBatch.from_arrays([pa.Array.from_buffers(pa.int64(), 3, [None, pa.py_buffer(bytes(24))])],
                                 names=["id"])
batches = list(_probe("arrow_probe")(iter([ids])))
print(json.dumps({"pandas": "pandas" in sys.modules, "batches": [b.to_pylist() for b in batches]}))
"""


def test_the_executor_probe_does_not_import_pandas():
    # The probe runs in the Python workers the read tasks then reuse: what it imports, a cold
    # job pays in each worker before the first record (pandas: ~0.3 s), and the read tasks
    # need no pandas.  pa.array() would import it (to check whether it was given a pandas
    # object): the probe builds its columns from buffers.
    out = subprocess.run([sys.executable, "-c", _PROBE_IN_A_FRESH_WORKER],
                         capture_output=True, text=True, timeout=120, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["pandas"] is False
    (batch,) = got["batches"]
    assert len(batch) == 3
    from kwire import __version__
    for report in batch:  # every field of a good report; the error column null
        assert report["kwire"] == __version__ and report["error"] is None
        assert report["exe"] and report["version"] == sys.version.split()[0]
        assert report["impl"] in ("cython", "python")

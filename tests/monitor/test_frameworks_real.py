"""``memfit.configure``, ``memfit.stats``, the publisher and ``memfit run`` with the real
TensorFlow and JAX (their CPU builds: ``make test-frameworks`` installs them; skipped where they
are not installed).

What is checked against the frameworks themselves: JAX's own parser of its GPU options
(``jaxlib.xla_client.generate_pjrt_gpu_plugin_options``, what its GPU backend is built from)
reads the variables memfit set; TensorFlow and JAX report their runtimes started, after which
memfit says "too late"; their CPU devices give the stats schema. Each case runs in a fresh
Python, since the order of import is the point.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _has(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


needs_jax = pytest.mark.skipif(not _has("jax"), reason="jax is not installed")
needs_tf = pytest.mark.skipif(not _has("tensorflow"), reason="tensorflow is not installed")


def _env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("XLA_", "TF_FORCE", "TF_GPU", "PYTORCH_"))
    }
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    env.update(extra)
    return env


def _run(code: str, **extra: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=_env(**extra),
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@needs_jax
def test_jax_reads_what_configure_set_and_then_it_is_too_late():
    out = _run(
        """
        import json, warnings
        import memfit
        before = memfit.configure(growth=True, limit=0.3, allocator="platform", framework="jax")
        import jax
        from jaxlib import xla_client
        options = xla_client.generate_pjrt_gpu_plugin_options()
        from memfit.monitor import _framework_numbers as numbers
        started_before = numbers.started("jax")
        jax.numpy.ones(1000).block_until_ready()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            after = memfit.configure(growth=False, framework="jax")
        try:
            memfit.configure(limit=0.5, framework="jax", strict=True)
            strict = None
        except memfit.monitor.ConfigurationTooLateError as exc:
            strict = str(exc)
        rows = [r.to_dict() for r in memfit.stats("jax")]
        print(json.dumps({
            "before": [(a.setting, a.status) for a in before.actions],
            "options": {k: options.get(k) for k in ("allocator", "memory_fraction", "preallocate")},
            "started_before": started_before, "started": numbers.started("jax"),
            "after": [(a.setting, a.status) for a in after.actions],
            "warned": [str(w.message) for w in caught], "strict": strict, "rows": rows,
        }))
        """
    )
    assert out["before"] == [["growth", "set"], ["limit", "set"], ["allocator", "set"]]
    # JAX's own reading of the variables: what its GPU backend would be built with
    assert out["options"] == {"allocator": "platform", "memory_fraction": 0.3, "preallocate": False}
    assert (out["started_before"], out["started"]) == (False, True)
    assert out["after"] == [["growth", "too late"]]
    assert any("jax growth is not in effect (too late)" in w for w in out["warned"])
    assert out["strict"].startswith("Too late for jax limit")
    (row,) = out["rows"]  # one CPU device, which keeps no memory statistics
    assert row == {
        "framework": "jax",
        "device": "cpu:0",
        "kind": "cpu",
        "index": None,
        "uuid": None,
        "in_use": None,
        "peak": None,
        "pool": None,
        "limit": None,
    }


@needs_tf
def test_tensorflow_gets_its_variables_and_its_limit_hook_at_import():
    out = _run(
        """
        import json, os, warnings
        import memfit
        from memfit.monitor import _framework_numbers as numbers, _frameworks
        found = memfit.configure(growth=True, limit="1GiB", allocator="async",
                                 framework="tensorflow")
        waiting = _frameworks.pending_imports()
        import tensorflow as tf
        after_import = _frameworks.pending_imports()
        started_import = numbers.started("tensorflow")
        x = tf.ones((512, 512))
        y = tf.matmul(x, x)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            late = memfit.configure(growth=False, limit="2GiB", framework="tensorflow")
        rows = [r.to_dict() for r in memfit.stats("tensorflow")]
        print(json.dumps({
            "actions": [(a.setting, a.status, a.what) for a in found.actions],
            "env": {k: os.environ.get(k) for k in ("TF_FORCE_GPU_ALLOW_GROWTH",
                                                   "TF_GPU_ALLOCATOR")},
            "waiting": waiting, "after_import": after_import, "started_import": started_import,
            "started": numbers.started("tensorflow"),
            "late": [(a.setting, a.status) for a in late.actions], "rows": rows,
        }))
        """,
        # TensorFlow's CPU allocator keeps statistics as a BFC allocator, not its default on
        # every CPU (not on CI's AMD EPYC): asked for here so that the numbers are real
        TF_CPU_ALLOCATOR_USE_BFC="true",
    )
    assert out["actions"] == [
        ["growth", "set", "TF_FORCE_GPU_ALLOW_GROWTH=true"],
        ["limit", "pending", "a logical device of 1024 MiB on every GPU"],
        ["allocator", "set", "TF_GPU_ALLOCATOR=cuda_malloc_async"],
    ]
    assert out["env"] == {
        "TF_FORCE_GPU_ALLOW_GROWTH": "true",
        "TF_GPU_ALLOCATOR": "cuda_malloc_async",
    }
    assert (out["waiting"], out["after_import"]) == (["tensorflow"], [])
    # importing TensorFlow does not start its runtime; the first op does
    assert (out["started_import"], out["started"]) == (False, True)
    assert out["late"] == [["growth", "too late"], ["limit", "too late"]]
    (row,) = out["rows"]
    assert (row["framework"], row["device"], row["kind"], row["pool"]) == (
        "tensorflow",
        "cpu:0",
        "cpu",
        None,
    )
    assert row["in_use"] >= 512 * 512 * 4 * 2 and row["peak"] >= row["in_use"], row


@needs_tf
def test_a_tensorflow_device_that_keeps_no_statistics_has_a_row_without_numbers():
    # TensorFlow's CPU allocator without BFC (its default on CI's AMD EPYC) refuses
    # get_memory_info; stats() and publishing must not fail for it
    out = _run(
        """
        import json
        import tensorflow as tf
        import memfit
        tf.ones((64, 64))
        try:
            tf.config.experimental.get_memory_info("/device:CPU:0")
            refused = False
        except ValueError:
            refused = True
        print(json.dumps({"refused": refused,
                          "rows": [r.to_dict() for r in memfit.stats("tensorflow")]}))
        """,
        TF_CPU_ALLOCATOR_USE_BFC="false",
    )
    (row,) = out["rows"]
    assert row["device"] == "cpu:0"
    if out["refused"]:
        assert (row["in_use"], row["peak"]) == (None, None)


@needs_jax
@needs_tf
def test_a_publishing_process_writes_both_frameworks_rows_and_its_settings(tmp_path):
    out = _run(
        """
        import json, os
        import jax, tensorflow as tf
        import memfit
        jax.numpy.ones(10).block_until_ready()
        tf.ones((64, 64))
        pub = memfit.publish(interval=60)
        pub.publish_now()
        with open(pub.path) as f:
            doc = json.load(f)
        pub.stop()
        print(json.dumps(doc))
        """,
        MEMFIT_RUNTIME_DIR=str(tmp_path / "rt"),
        XLA_PYTHON_CLIENT_PREALLOCATE="false",
    )
    assert {(r["framework"], r["device"]) for r in out["frameworks"]} == {
        ("jax", "cpu:0"),
        ("tensorflow", "cpu:0"),
    }
    settings = out["settings"]
    assert settings["environment"]["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert settings["jax"]["started"] and settings["tensorflow"]["started"]
    assert settings["tensorflow"]["growth"] == []  # no GPU to grow on
    assert out["devices"] == [] and out["cuda_initialised"] is False


@needs_jax
def test_memfit_run_sets_jax_options_in_the_child(tmp_path):
    code = (
        "import json; from jaxlib import xla_client; "
        "o = xla_client.generate_pjrt_gpu_plugin_options(); "
        "print(json.dumps({k: o.get(k) for k in ('memory_fraction', 'preallocate', 'allocator')}))"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "memfit",
            "run",
            "--no-history",
            "--oom-dir",
            str(tmp_path),
            "--growth",
            "--limit",
            "0.3",
            "--allocator",
            "async",
            "--",
            sys.executable,
            "-c",
            code,
        ],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {
        "memory_fraction": 0.3,
        "preallocate": False,
        "allocator": "cuda_async",
    }
    assert "jax        growth    set         XLA_PYTHON_CLIENT_PREALLOCATE=false" in done.stderr


@needs_jax
@needs_tf
def test_doctor_on_a_machine_with_no_gpu_lists_the_cpu_builds(capsys):
    from memfit.cli import main

    assert main(["doctor", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    builds = {f["name"]: (f["version"] is not None, f["cuda"]) for f in found["frameworks"]}
    assert builds["jax"] == (True, "none") and builds["tensorflow"] == (True, "none")
    assert found["gpus"] == [] and found["nvml_error"]
    assert [a["severity"] for a in found["advice"]] == ["info"]  # nothing wrong, no GPU


@needs_jax
def test_the_fraction_named_by_another_python_is_renamed_for_this_jax():
    """memfit run's parent may have no JAX (it then writes the older name): the child's copy
    renames it, before JAX starts, to the name the child's JAX reads."""
    settings = {"limit_bytes": None, "limit_fraction": 0.3, "limit_given": "share"}
    out = _run(
        """
        import json, os
        from memfit.monitor import _framework_numbers as numbers, _frameworks
        _frameworks.arm_from_environment(numbers.started)
        names = sorted(k for k in os.environ if k.endswith("MEM_FRACTION"))
        from jaxlib import xla_client
        fraction = xla_client.generate_pjrt_gpu_plugin_options().get("memory_fraction")
        print(json.dumps({"names": names, "wanted": _frameworks.jax_fraction_variable(),
                          "fraction": fraction}))
        """,
        XLA_PYTHON_CLIENT_MEM_FRACTION="0.3",
        MEMFIT_MEMORY=json.dumps({"settings": settings, "frameworks": ["jax"]}),
    )
    assert out["names"] == [out["wanted"]]
    assert out["fraction"] == 0.3

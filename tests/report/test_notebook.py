"""examples/estimate_and_plan.ipynb, executed by a real Jupyter kernel running this
interpreter: every cell runs without an error, each result shows as memfit's HTML report, and
no HTML output loads anything from the network."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import nbformat
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NOTEBOOK = EXAMPLES / "estimate_and_plan.ipynb"
# what the notebook displays, in its order (the memfit-<kind> class of each report)
REPORTS = ["memfit-estimate", "memfit-plan", "memfit-batch-size", "memfit-snapshot"]
CELL_TIMEOUT_S = 180


def _kernel(tmp_path: Path) -> KernelManager:
    """A manager for a ``python3`` kernel that runs this interpreter (the virtual
    environment's, with memfit installed), whatever other kernelspecs this machine has."""
    spec = tmp_path / "kernels" / "python3"
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    kernel = {"argv": argv, "display_name": "memfit test", "language": "python"}
    (spec / "kernel.json").write_text(json.dumps(kernel))
    specs = KernelSpecManager(kernel_dirs=[str(tmp_path / "kernels")])
    return KernelManager(kernel_name="python3", kernel_spec_manager=specs)


def _outputs(nb: Any, output_type: str) -> list[Any]:
    return [o for cell in nb.cells for o in cell.get("outputs", []) if o.output_type == output_type]


def test_the_example_notebook_runs_and_shows_offline_reports(tmp_path: Path) -> None:
    committed = nbformat.read(NOTEBOOK, as_version=4)
    code = [cell for cell in committed.cells if cell.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)

    nb = nbformat.read(NOTEBOOK, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("import sys\nprint(sys.executable)"))
    client = NotebookClient(
        nb,
        km=_kernel(tmp_path),
        timeout=CELL_TIMEOUT_S,
        allow_errors=False,
        resources={"metadata": {"path": str(EXAMPLES)}},
    )
    client.execute()

    assert _outputs(nb, "error") == []
    assert nb.cells[-1].outputs[0].text.strip() == sys.executable
    html = [
        o.data["text/html"]
        for kind in ("execute_result", "display_data")
        for o in _outputs(nb, kind)
        if "text/html" in o.data
    ]
    shown = [kind for page in html for kind in REPORTS if f'class="memfit-report {kind}"' in page]
    assert shown == REPORTS
    for page in html:
        assert "http://" not in page and "https://" not in page
        assert "<script" not in page

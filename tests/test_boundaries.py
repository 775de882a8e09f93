"""The contracts that keep the loop honest, checked on the import graph by import-linter."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_pipeline_never_imports_the_world_and_model_code_and_training_program_never_import_dagster():
    lint = Path(sys.executable).parent / "lint-imports"
    out = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "4 kept, 0 broken" in out.stdout


def test_code_passes_ruff():
    ruff = Path(sys.executable).parent / "ruff"
    out = subprocess.run([str(ruff), "check", "rmi_pipeline", "tests", "bench"], cwd=ROOT, capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stdout


def test_no_two_modules_import_each_other_even_through_others():
    """A circle makes each module's meaning depend on the other's import order; function-level imports count too."""
    import grimp

    graph = grimp.build_graph("rmi_pipeline")
    circles = {tuple(sorted((a, b))) for a in graph.modules for b in graph.find_modules_directly_imported_by(a)
               if b.startswith("rmi_pipeline") and graph.chain_exists(importer=b, imported=a)}
    assert not circles

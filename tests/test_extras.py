"""The optional extras (pyproject.toml: serve, chat, hf): without them the pipeline's definitions still load, and a
command that needs one names the line that installs it instead of failing on an import."""

import subprocess
import sys
import tomllib
from pathlib import Path

PYPROJECT = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())

# the extras' modules that no base dependency installs: a base install lacks these (a None in sys.modules makes an
# import fail and find_spec answer None, as for a module that is not installed)
WITHOUT_EXTRAS = """
import sys
for name in ("prometheus_client", "slack_bolt", "transformers", "tokenizers", "safetensors", "peft"):
    sys.modules[name] = None

from rmi_pipeline.cli.main import main
from rmi_pipeline.definitions import build_definitions
from rmi_pipeline.recipes.base import load_recipe
from rmi_pipeline.settings import Settings

defs = build_definitions(Settings())
print("assets:", len(list(defs.resolve_all_asset_keys())))
for command in ("serve", "chat", "run"):
    print(command, "exit:", main([command]))
try:
    load_recipe("rmi_pipeline.recipes.words:WordsRecipe")
except RuntimeError as exc:
    print("words:", exc)
"""


def test_the_definitions_load_without_the_extras_and_each_command_names_the_one_it_needs(tmp_path):
    out = subprocess.run([sys.executable, "-c", WITHOUT_EXTRAS], capture_output=True, text=True, timeout=300,
                         env={"PATH": "/usr/bin:/bin", "RMI_HOME": str(tmp_path / "home"),
                              "DAGSTER_HOME": str(tmp_path / "home" / "dagster"), "MLFLOW_DISABLE_TELEMETRY": "true"})
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.split("assets:")[1].split()[0]) > 0
    assert "serve exit: 2" in out.stdout and "chat exit: 2" in out.stdout and "run exit: 2" in out.stdout
    assert "rmi serve needs the serve extra (prometheus_client not installed): pip install 'rmi-pipeline[serve]'" \
        in out.stderr
    assert "rmi run needs the serve extra" in out.stderr
    assert "rmi chat needs the chat extra (slack_bolt not installed): pip install 'rmi-pipeline[chat]'" in out.stderr
    assert "words: the Hugging Face recipes need the hf extra" in out.stdout and "rmi-pipeline[hf]" in out.stdout


def test_the_extras_the_code_checks_are_those_pyproject_installs():
    from rmi_pipeline.cli.extras import EXTRAS
    from rmi_pipeline.recipes.hf.recipe import HF_EXTRA

    extras = PYPROJECT["project"]["optional-dependencies"]
    module = {"prometheus-client": "prometheus_client", "slack-bolt": "slack_bolt"}
    for name, modules in {**EXTRAS, "hf": HF_EXTRA}.items():
        assert sorted(modules) == sorted(module.get(p, p) for p in extras[name]), name
    assert not set(PYPROJECT["project"]["dependencies"]) & {p for name in ("serve", "chat", "hf") for p in extras[name]}
    assert "rmi-pipeline[prod,docs,serve,chat,hf]" in extras["dev"]  # `make test` installs every extra

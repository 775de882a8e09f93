"""Settings in groups: each reads its own RMI_ prefix, every variable names one knob, and a renamed variable
stops the program with its new name instead of being ignored."""

import pytest
from pydantic_settings import BaseSettings

from rmi_pipeline.cli.main import main
from rmi_pipeline.settings import RENAMED, Settings


def variables() -> list[str]:
    """Every RMI_* variable the settings read: a group's prefix and field, or RMI_ and a top-level field."""
    names = []
    for name, field in Settings.model_fields.items():
        group = field.annotation
        if isinstance(group, type) and issubclass(group, BaseSettings):
            names += [f"{group.model_config['env_prefix']}{inner}".upper() for inner in group.model_fields]
        else:
            names.append(f"RMI_{name}".upper())
    return names


def test_each_variable_names_one_knob_and_no_old_name_is_read_again():
    names = variables()
    assert len(names) == len(set(names)) > 90
    assert not set(RENAMED) & set(names)
    assert set(RENAMED.values()) <= set(names)


def test_each_group_reads_its_own_prefix(monkeypatch):
    monkeypatch.setenv("RMI_GATE_MIN_GAIN", "0.2")
    monkeypatch.setenv("RMI_TRAIN_BOOTSTRAP_STEPS", "123")
    monkeypatch.setenv("RMI_SERVE_CORS_ORIGINS", "https://a.example, https://b.example,")
    monkeypatch.setenv("RMI_SLACK_ALLOWED_USERS", "U1,U2")
    monkeypatch.setenv("RMI_CYCLE_MIN_NEW_EVENTS", "7")
    settings = Settings()
    assert settings.gate.min_gain == 0.2 and settings.training.bootstrap_steps == 123
    assert settings.serving.cors_origins == ("https://a.example", "https://b.example")
    assert settings.chat.allowed_users == {"U1", "U2"} and settings.automation.cycle_min_new_events == 7
    assert settings.gate.confidence == 0.98  # what is not set keeps its default


def test_a_renamed_variable_stops_the_program_with_its_new_name(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("RMI_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("RMI_BOOTSTRAP_STEPS", "100")
    with pytest.raises(ValueError, match="RMI_BOOTSTRAP_STEPS is now RMI_TRAIN_BOOTSTRAP_STEPS"):
        Settings()
    assert main(["status"]) == 2
    assert "RMI_TRAIN_BOOTSTRAP_STEPS" in capsys.readouterr().err
    assert not (tmp_path / "home").exists()  # refused before anything was written


def test_secrets_never_reach_a_printed_settings_object(monkeypatch):
    monkeypatch.setenv("RMI_SERVE_API_KEYS", "key-one-secret,key-two-secret")
    monkeypatch.setenv("RMI_SLACK_SIGNING_SECRET", "signing-secret-value")
    monkeypatch.setenv("RMI_SLACK_BOT_TOKEN", "xoxb-bot-token-value")
    settings = Settings()
    assert settings.serving.api_keys == ("key-one-secret", "key-two-secret")
    assert settings.chat.bot_token.get_secret_value() == "xoxb-bot-token-value"
    for text in (repr(settings), str(settings), settings.model_dump_json()):
        assert not any(secret in text for secret in ("key-one", "key-two", "signing-secret-value", "xoxb-bot"))

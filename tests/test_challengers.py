"""What a team sets to train several challengers per cycle: the candidates the grid makes, the settings refused with
the reason, and the run config that lets them train side by side (tests/test_challengers_loop.py runs one)."""

import pytest
from pydantic import ValidationError

from rmi_pipeline.automation.jobs import cycle_run_config
from rmi_pipeline.settings import Challengers, Settings


def test_an_empty_grid_varies_the_seed_only():
    assert Challengers(challengers=3).variations() == [{"seed": 0}, {"seed": 1}, {"seed": 2}]
    assert Challengers().variations() == [{"seed": 0}]  # one challenger: the cycle's own seed


def test_the_grid_s_combinations_are_taken_in_turn_and_repeats_move_the_seed_on():
    grid = {"learning_rate": [0.003, 0.001], "mix": [{}, {"practice": 0.3}]}
    made = Challengers(challengers=5, challenger_grid=grid).variations()
    assert [(v["learning_rate"], v["mix"]) for v in made] == [
        (0.003, {}), (0.003, {"practice": 0.3}), (0.001, {}), (0.001, {"practice": 0.3}), (0.003, {})]
    assert len({v["seed"] for v in made}) == 5  # the fifth repeats the first combination, not its seed
    seeded = Challengers(challengers=3, challenger_grid={"seed": [5, 7]}).variations()
    assert [v["seed"] for v in seeded] == [5, 7, 13]


@pytest.mark.parametrize(("grid", "said"), [
    ({"lr": [0.1]}, "unknown axis 'lr'"),
    ({"learning_rate": []}, "non-empty list"),
    ({"learning_rate": [-1]}, "not a positive number"),
    ({"mix": [{"feedbak": 0.5}]}, "must map training sources"),
    ({"seed": [-2]}, "at or above 0"),
])
def test_a_grid_that_would_train_something_else_than_asked_is_refused_with_the_reason(monkeypatch, grid, said):
    import json

    monkeypatch.setenv("RMI_CHALLENGER_GRID", json.dumps(grid))
    with pytest.raises(ValidationError, match=said):
        Settings()


def test_the_environment_names_the_issue_gives(monkeypatch):
    monkeypatch.setenv("RMI_CHALLENGERS", "4")
    monkeypatch.setenv("RMI_MAX_PARALLEL_TRAINING", "2")
    monkeypatch.setenv("RMI_SELECTION_SHARE", "0.4")
    rules = Settings().candidates
    assert (rules.challengers, rules.max_parallel_training, rules.selection_share) == (4, 2, 0.4)


def test_challengers_train_side_by_side_only_when_there_are_several_and_parallel_training_is_allowed(monkeypatch):
    assert cycle_run_config(Settings()) == {}  # the job's default: every step in the run's process
    monkeypatch.setenv("RMI_CHALLENGERS", "3")
    assert cycle_run_config(Settings()) == {}  # several, in turn
    monkeypatch.setenv("RMI_MAX_PARALLEL_TRAINING", "2")
    config = cycle_run_config(Settings(), {"size": "small", "taught": True})
    multiprocess = config["execution"]["config"]["multiprocess"]
    assert multiprocess["max_concurrent"] == 2 and "forkserver" in multiprocess["start_method"]
    assert config["ops"] == {"candidate_model": {"config": {"size": "small", "taught": True}}}

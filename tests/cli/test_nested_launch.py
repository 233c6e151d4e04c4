"""A rank that runs dslaunch itself starts an independent job (issue 22, item 3).

The inner launcher must not take the enclosing job's DSLAUNCH_*/PET_* settings for its own (the inherited
DSLAUNCH_LOG_COLOR=0 was refused as --log-color; the inherited run id made the inner agent's teardown sweep
SIGKILL the outer job's other rank), but it honours what the rank set or changed itself.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dslaunch import nesting
from tests.helpers import SCRIPTS, run_cli
from tests.plans import cli_error, plan_of

OUTER = f"outer-nest-{os.getpid()}"  # per test process: two workers' jobs never share a run id


@pytest.mark.launch
def test_a_rank_runs_its_own_jobs_and_its_sibling_survives(tmp_path: Path) -> None:
    cases = {
        "plain": [{}],
        "user_run_id": [{"DSLAUNCH_RUN_ID": f"chosen-inner-{os.getpid()}", "DSLAUNCH_LOG_COLOR": "never"}],
        "outer_run_id": [{}, "--run-id", OUTER],
    }
    env = {"OUT_DIR": str(tmp_path), "NESTED_CASES": json.dumps(cases), "INNER_SCRIPT": str(SCRIPTS / "env_to_file.py")}
    logs = tmp_path / "logs"
    args = ["--nproc-per-node", "2", "--master-port", "0", "--run-id", OUTER, "--log-dir", str(logs)]
    done = run_cli([*args, str(SCRIPTS / "nested_outer.py")], env=env, timeout=150)
    assert done.returncode == 0, done.stderr  # 137: an inner agent's sweep killed rank 1
    results = json.loads((tmp_path / "results.json").read_text())
    assert (tmp_path / "sibling.alive").read_text() == OUTER  # not swept by an inner agent

    plain = json.loads((tmp_path / "plain.json").read_text())
    assert results["plain"]["code"] == 0, results["plain"]
    assert plain["DSLAUNCH_RUN_ID"] == plain["TORCHELASTIC_RUN_ID"] != OUTER
    assert plain[nesting.CHAIN_VAR] == f"{OUTER},{plain['DSLAUNCH_RUN_ID']}"
    assert "DSLAUNCH_LOG_DIR" not in plain  # the outer job's --log-dir is not the inner job's
    assert plain["DSLAUNCH_LOG_COLOR"] == "0"  # the inner launcher's own decision (not a terminal)
    assert nesting.RECORD_VAR in plain  # the inner job's own record, for a job its ranks start

    chosen = json.loads((tmp_path / "user_run_id.json").read_text())
    assert results["user_run_id"]["code"] == 0, results["user_run_id"]
    assert chosen["DSLAUNCH_RUN_ID"] == f"chosen-inner-{os.getpid()}"  # set by the rank itself: honoured

    assert results["outer_run_id"]["code"] == 2
    assert f"'{OUTER}' is the run id of a job this launcher runs in" in results["outer_run_id"]["stderr"]


ENCLOSING = {
    "DSLAUNCH_LOG_COLOR": "0",
    "DSLAUNCH_LOG_FORMAT": "json",
    "DSLAUNCH_LOG_RANKS": "all",
    "DSLAUNCH_RUN_ID": OUTER,
    "DSLAUNCH_MESH": "dp=4,tp=2",
    "DSLAUNCH_LOG_DIR": "/outer/logs",
    "PET_NNODES": "2",
    "PET_NODE_RANK": "1",
    "PET_MASTER_ADDR": "10.0.0.1",
}


def _as_rank(extra: dict[str, str | None] | None = None) -> dict[str, str | None]:
    """An environment as the enclosing job's agent leaves it in a rank, with ``extra`` laid over it."""
    env = {**ENCLOSING, nesting.RECORD_VAR: nesting.record(ENCLOSING), nesting.CHAIN_VAR: OUTER}
    return {**env, **(extra or {})}


def test_a_nested_plan_takes_none_of_the_enclosing_settings() -> None:
    plan = plan_of(["--dry-run", "x.py"], env=_as_rank())
    assert plan.run_id != OUTER and plan.launcher == "local" and plan.world_size == 1
    env = dict(plan.env)
    assert (env["DSLAUNCH_LOG_FORMAT"], env["DSLAUNCH_LOG_RANKS"]) == ("console", "0")
    assert "DSLAUNCH_MESH" not in env and "DSLAUNCH_LOG_DIR" not in env and plan.log_dir is None


def test_what_the_rank_changed_or_added_is_honoured() -> None:
    changed = {"DSLAUNCH_LOG_FORMAT": "console", "DSLAUNCH_LOG_RANKS": "none", "DSLAUNCH_RUN_ID": "mine"}
    plan = plan_of(["--dry-run", "x.py"], env=_as_rank(changed))
    assert plan.run_id == "mine" and dict(plan.env)["DSLAUNCH_LOG_RANKS"] == "none"


def test_the_run_id_of_an_enclosing_job_is_refused() -> None:
    code, err = cli_error(["--run-id", OUTER, "--dry-run", "x.py"], env=_as_rank())
    assert code == 2 and f"'{OUTER}' is the run id of a job this launcher runs in" in err


def test_a_changed_colour_value_is_read_and_checked() -> None:
    code, err = cli_error(["--dry-run", "x.py"], env=_as_rank({"DSLAUNCH_LOG_COLOR": "1"}))
    assert code == 2 and "'1' is not one of 'auto', 'always', 'never'" in err


@pytest.mark.parametrize(
    ("environ", "forgotten"),
    [
        ({}, []),  # not in a rank: nothing to forget
        ({"DSLAUNCH_LOG_COLOR": "0"}, []),  # no record: set by the user
        (_as_rank(), sorted([*ENCLOSING, nesting.RECORD_VAR])),
        (_as_rank({"DSLAUNCH_LOG_COLOR": "never"}), sorted({*ENCLOSING, nesting.RECORD_VAR} - {"DSLAUNCH_LOG_COLOR"})),
        (_as_rank({"DSLAUNCH_MESH": None}), sorted({*ENCLOSING, nesting.RECORD_VAR} - {"DSLAUNCH_MESH"})),
        (
            _as_rank({"DSLAUNCH_PROGRESS_FILE": "/t/p"}),
            sorted([*ENCLOSING, nesting.RECORD_VAR, "DSLAUNCH_PROGRESS_FILE"]),
        ),
        ({nesting.RECORD_VAR: "garbage,,X:,:y", "X": "1"}, [nesting.RECORD_VAR]),
    ],
)
def test_what_is_forgotten(environ: dict[str, str | None], forgotten: list[str]) -> None:
    env = {k: v for k, v in environ.items() if v is not None}
    assert nesting.inherited(env) == forgotten
    kept = {k: v for k, v in env.items() if k not in forgotten}
    assert nesting.forget_parent_job(env) == forgotten and env == kept
    assert nesting.CHAIN_VAR not in forgotten  # the enclosing run ids pass through


_NAMES = st.text("ABCDEFGHIJ_", min_size=1, max_size=6).map(lambda s: f"DSLAUNCH_{s}")
_VALUES = st.text(max_size=12)


@given(st.dictionaries(_NAMES, _VALUES, max_size=8), st.dictionaries(_NAMES, _VALUES, max_size=4))
def test_only_unchanged_recorded_values_are_forgotten(left: dict[str, str], later: dict[str, str]) -> None:
    """Whatever the rank sets after its launcher (``later``), a nested launcher keeps exactly that."""
    env = {**left, nesting.RECORD_VAR: nesting.record(left), **later}
    nesting.forget_parent_job(env)
    assert env == {k: v for k, v in later.items() if left.get(k) != v}


def test_the_chain_grows_by_one_job_per_level() -> None:
    assert nesting.chain({}, "a") == "a"
    assert nesting.chain({nesting.CHAIN_VAR: "a"}, "b") == "a,b"
    assert nesting.chain({nesting.CHAIN_VAR: "a,b"}, "b") == "a,b"  # a restart of the same job
    assert nesting.enclosing_run_ids({nesting.CHAIN_VAR: "a,,b"}) == ["a", "b"]


def test_rank_files_names_match_the_bootstrap() -> None:
    from dslaunch.bootstrap import progress
    from dslaunch.observe import record

    assert set(nesting.RANK_FILES) == {progress.ENV, progress.TRACE_ENV, record.ENV_FILE}


def test_the_record_names_only_launcher_namespaces() -> None:
    text = nesting.record({"DSLAUNCH_A": "1", "PET_B": "2", "HOME": "/root", nesting.CHAIN_VAR: "x"})
    assert sorted(nesting.parse_record(text)) == ["DSLAUNCH_A", "PET_B"]
    assert os.environ.get(nesting.RECORD_VAR) is None  # the test session itself is no rank

"""``evaluate`` against a server that grades a real dataset: every answer says how grading went
(``Evaluation.status``, the server's vocabulary), so an empty patch and one that does not apply are
told apart, and a grading that could not judge the patch (a timeout, the eval script killed) raises
``EvaluationError`` instead of passing for a reward of 0. A server without ``--eval-dataset``, an
unknown dataset or instance: typed errors, never an Evaluation."""

from __future__ import annotations

import asyncio
from typing import Any, List

import pytest

from conftest import EVAL_DATASET, EVAL_INSTANCE, EvalServer
from minisandbox import AsyncClient, Client, EvaluationError, NotConfiguredError, NotFoundError

ID = EVAL_INSTANCE


def gold(srv: EvalServer) -> str:
    return str(srv.rows[ID]["patch"])


def with_max(srv: EvalServer, body: str) -> str:
    """The gold patch with another body for the ``max`` it adds (the line the tests call)."""
    g = gold(srv)
    added = next(line for line in g.splitlines() if line.startswith("+max()"))
    return g.replace(added, "+max() { " + body + "; }")


def test_each_answer_says_how_grading_went_and_an_ungraded_one_raises(eval_server: EvalServer) -> None:
    srv = eval_server
    cases = {
        "gold": (gold(srv), None),
        "empty": ("", None),
        "unappliable": (gold(srv).replace("max()", "mux()"), None),
        # the tests never end: the eval script runs past its limit
        "timeout": (with_max(srv, "sleep 600"), "2s"),
        # the tests kill the eval script with themselves: the log has no end marker
        "killed": (with_max(srv, "kill -KILL 0"), None),
    }

    async def grade_all() -> List[Any]:
        async with AsyncClient(srv.url, token_file=srv.token_file) as c:
            return await asyncio.gather(
                *(c.evaluate(EVAL_DATASET, ID, patch, timeout=t) for patch, t in cases.values()), return_exceptions=True
            )

    out = dict(zip(cases, asyncio.run(grade_all())))
    g, e, u = out["gold"], out["empty"], out["unappliable"]
    assert (g.status, g.resolved, g.graded, g.reward, g.error) == ("completed", True, True, 1.0, None), g
    assert (e.status, e.resolved, e.reward) == ("empty_patch", False, 0.0), e
    assert (u.status, u.resolved, u.reward) == ("patch_apply_failed", False, 0.0), u
    assert u.error and "apply" in u.error
    # the report stays SWE-bench's own entry, the same for both, where the status tells them apart
    assert e.report[ID] == u.report[ID] == {"patch_is_None": False, "patch_exists": True,
                                             "patch_successfully_applied": False, "resolved": False}
    assert g.report[ID]["tests_status"]["FAIL_TO_PASS"]["success"] == ["tests/test_lib.sh::test_max_second"]

    for name, status in (("timeout", "timeout"), ("killed", "error")):
        err = out[name]
        assert isinstance(err, EvaluationError), (name, err)
        assert err.code == "NOT_GRADED" and err.evaluation.status == status and not err.evaluation.graded, (name, err.evaluation)
        assert status in str(err) and ID in str(err)
        with pytest.raises(EvaluationError):
            err.evaluation.reward  # no reward can be read from it either


def test_unknown_dataset_or_instance_is_not_found(eval_client: Client) -> None:
    with pytest.raises(NotFoundError) as e:
        eval_client.evaluate("lite", ID, "x")
    assert EVAL_DATASET in (e.value.hint or "")
    with pytest.raises(NotFoundError):
        eval_client.evaluate(EVAL_DATASET, "test__shlib-99", "x")


def test_a_server_without_eval_datasets_says_so(client: Client) -> None:
    with pytest.raises(NotConfiguredError) as e:
        client.evaluate(EVAL_DATASET, ID, "x")
    assert e.value.status == 501 and "--eval-dataset" in (e.value.hint or "")

"""The iterative-dpo flow's pointer rules. Runs of the flow for real — a round continuing from the
committed policy, a gate keeping a wrecked round out, a failed round leaving the pointer — are in
tests/test_gates_and_compare.py; scheduled rounds in tests/test_deployment.py."""

from __future__ import annotations

import pytest

from alignment import storage


def test_a_later_initial_policy_is_refused_not_ignored(tmp_path):
    """Only the pointer decides once it exists: the same initial_policy (a schedule that always
    passes it) continues, another one is refused in one line unless restart=true."""
    from alignflow.tasks.orchestration.policy_pointer import advance
    from alignflow.tasks.orchestration.policy_rounds import start_pointer
    from alignment.config import ConfigError

    store = str(tmp_path / "store")
    with pytest.raises(ConfigError, match="has no policy yet .*give its first run --param initial_policy="):
        start_pointer(store, "r", None, False, "iterative-dpo")
    assert start_pointer(store, "r", "/models/sft", False, "iterative-dpo") is None
    model = tmp_path / "round1"
    model.mkdir()
    (model / "w.bin").write_bytes(b"x")
    storage.commit_dir(model, model)
    advance(store, "r", None, str(model), {"policy_in": "/models/sft"})
    assert start_pointer(store, "r", None, False, "iterative-dpo").round == 1
    assert start_pointer(store, "r", "/models/sft", False, "iterative-dpo").round == 1
    with pytest.raises(
        ConfigError, match=r"initial_policy=/models/other: run 'r' already has a policy at round 1 .*restart=true"
    ) as e:
        start_pointer(store, "r", "/models/other", False, "iterative-dpo")
    assert "\n" not in str(e.value)
    assert start_pointer(store, "r", "/models/other", True, "iterative-dpo") is None

"""Issue 46's refusal budget per limit (`bench.field.budget`): 2 refusals per level a limit moves down and per
probe above it."""

from __future__ import annotations

from chaos_mode.zai.catalog import ACCOUNT
from chaos_mode_tools.bench.field import virtual
from chaos_mode_tools.bench.field.budget import RefusalBudget


def test_a_limit_is_charged_its_own_refusals_and_allowed_two_per_level_down_and_per_probe() -> None:
    budget = RefusalBudget()
    budget.sample({"glm-4.7": 3, ACCOUNT: 20})
    budget.sample({"glm-4.7": 1, ACCOUNT: 20})  # two levels down
    budget.sample({"glm-4.7": 2, ACCOUNT: 20})  # up: no budget
    budget.probe("glm-4.7", account=False)
    budget.probe("glm-4.7", account=True)
    for reason in ("model", "band", "model", "model", "model", "model", "random", "random"):
        budget.refusal("glm-4.7", reason)
    budget.refusal("glm-4.7", "accountBand")
    assert budget.allowed("glm-4.7") == 6 and budget.refused["glm-4.7"] == 6  # z.ai's noise is no step
    assert budget.allowed(ACCOUNT) == 2 and budget.refused[ACCOUNT] == 1
    assert budget.over() == [] and budget.charged() == 2
    budget.refusal("glm-4.7", "model")
    assert budget.over() == ["4.7 7/6"]


def test_in_virtual_time_limits_that_fall_for_good_are_learned_within_the_budget() -> None:
    """`fallen`, seed 1: four limits fall mid-run; each is charged at most 2 refusals per level it moved
    down and per probe above it. The four that fell paid more than 1 per step: the budget is not slack."""
    budget = virtual.run("fallen", 1).budget
    assert budget.charged() >= 4 and budget.over() == []
    steps = {limit: budget.down[limit] + budget.probes[limit] for limit in budget.refused}
    assert sum(budget.refused[limit] > steps[limit] for limit in steps) >= 4

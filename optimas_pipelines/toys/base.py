"""What the three toys share: a per-instance choice, a fixed downstream component, a lookup reward."""
from __future__ import annotations

from optimas_cli.system import (
    HEURISTIC_ROUTE,
    Component,
    CompoundSystem,
    ConfigKind,
    Metric,
    Pipeline,
    Splits,
)


class FixedDownstream(Component):
    """The fixed downstream component (same model, same prompt throughout): it has no configuration.

    Its behaviour on each (query, option) is the chapter's measured outcome, stored with the query.
    """

    def __init__(self, name: str, description: str, option_field: str):
        super().__init__(name, description, inputs=("query_id", option_field), outputs=("used_option",))
        self.option_field = option_field

    def forward(self, inputs, value, ctx):
        return [{"used_option": x[self.option_field]} for x in inputs]


def toy_pipeline(
    name: str, selector: Component, downstream: Component, rows: list[dict], metric_name: str
) -> Pipeline:
    """Train, validation and test are the chapter's own queries: the toy has no others."""
    inputs = ("query_id", *dict.fromkeys(f for f in selector.inputs if f != "query_id"))
    system = CompoundSystem([selector, downstream], inputs=inputs, outputs=("used_option",))
    metric = Metric(metric_name, lambda ex, out: ex["reward"][out["used_option"]] if out["used_option"] else 0.0)
    return Pipeline(name=name, system=system, splits=Splits(list(rows), list(rows), list(rows)), metric=metric)


def per_instance_choice(**fields) -> dict:
    return dict(kind=ConfigKind.CHOICE, per_instance=True, default=dict(HEURISTIC_ROUTE), **fields)

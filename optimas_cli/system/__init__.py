"""The compound-system core: components, wiring, configurations, execution and accounting."""
from optimas_cli.system.component import (
    HEURISTIC_ROUTE,
    LRF_PRE_ROUTE,
    LRF_ROUTE,
    Component,
    ConfigKind,
    route_of,
    routes_by_lrf,
)
from optimas_cli.system.compound import CompoundSystem, Trajectory, WiringError
from optimas_cli.system.configuration import SystemConfig
from optimas_cli.system.context import RunContext
from optimas_cli.system.ledger import RunLedger
from optimas_cli.system.pipeline import Metric, Pipeline, SingleLLMTask, Splits

__all__ = [
    "HEURISTIC_ROUTE", "LRF_PRE_ROUTE", "LRF_ROUTE", "Component", "ConfigKind", "route_of", "routes_by_lrf",
    "CompoundSystem", "Trajectory",
    "WiringError", "SystemConfig", "RunContext", "RunLedger", "Metric", "Pipeline", "SingleLLMTask", "Splits",
]

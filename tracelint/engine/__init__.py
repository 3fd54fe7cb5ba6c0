"""The rule engine both halves share: findings, the rule catalog, config, suppressions and results."""
from tracelint.engine.catalog import RuleDoc, catalog
from tracelint.engine.config import Config, ConfigError, find_config, load_config_file
from tracelint.engine.finding import (
    Edit,
    Estimate,
    Evidence,
    Finding,
    Fix,
    Location,
    Severity,
    SourceLocation,
    TraceLocation,
)
from tracelint.engine.result import FileChecked, InputError, RunResult, TraceSummary
from tracelint.engine.rule import Rule, discover

__all__ = [
    "Config", "ConfigError", "Edit", "Estimate", "Evidence", "FileChecked", "Finding", "Fix", "InputError", "Location",
    "Rule", "RuleDoc", "RunResult", "Severity", "SourceLocation", "TraceLocation", "TraceSummary", "catalog",
    "discover", "find_config", "load_config_file",
]

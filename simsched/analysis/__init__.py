"""Analysis of results: the Amdahl burden fit and burden tables."""

from .amdahl import BurdenFit, amdahl_speedup, duration_for, fit_burden
from .burden import burden_table, format_burden_table

__all__ = ["BurdenFit", "amdahl_speedup", "burden_table", "duration_for", "fit_burden", "format_burden_table"]

"""Energy reports: one CSV schema (units in column names) plus a JSON sidecar per run."""

from edgeprof.report.schema import CORE_COLUMNS, columns_for, phase_columns, row_from_window
from edgeprof.report.writer import Report, ReportWriter, read_report, write_sidecar

__all__ = ["CORE_COLUMNS", "columns_for", "phase_columns", "row_from_window", "Report", "ReportWriter",
           "read_report", "write_sidecar"]

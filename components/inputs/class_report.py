"""Which classes of a CSR class index a class-balanced plan uses (`ClassReport`): stated in
`plans.class_report`, which needs NumPy alone, and named here for the TensorFlow samplers."""

from __future__ import annotations

from tfx_dynamic_inputs.plans import class_report as report

SMALL_CLASS_POLICIES = report.SMALL_CLASS_POLICIES
ClassReport = report.ClassReport
class_report = report.class_report

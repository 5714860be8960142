"""INT8 quantization with calibration data, per target, guarded by accuracy (`--precision int8`)."""

from deploycc.quantize.run import QuantizeReport, check_ready, load_samples, quantize_for_target

__all__ = ["QuantizeReport", "check_ready", "load_samples", "quantize_for_target"]

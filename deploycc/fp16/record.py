"""What the half-precision analysis found and chose: the record lives in records/half.py, below
every driver that reports it; its names are re-exported here for the analysis and its callers."""

from deploycc.records.half import BELOW_NORMAL as BELOW_NORMAL
from deploycc.records.half import BEYOND_RANGE as BEYOND_RANGE
from deploycc.records.half import FlaggedTensor as FlaggedTensor
from deploycc.records.half import HalfPrecisionReport as HalfPrecisionReport

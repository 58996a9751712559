"""Published on-demand prices of spotrun's GPU instance types, per region: the figures savings are measured against.

Linux, shared tenancy, USD per instance-hour. Source: the public instances.vantage.sh price listing (itself
built from AWS's Price List API), as exported on 2026-01-21 by the repository github.com/tsaol/aws-gpu
(``data/<family>_instances.js``, "Last updated: 2026-01-21"). The us-east-1 P4d/P4de/P5 figures are the
prices after AWS's June 2025 cut of P4 and P5 on-demand prices.

Only the regions below are claimed, and within a region only the types with a figure: a type AWS does not offer
there (``None``) or a region not listed has no on-demand figure, and spotrun then says the comparison is
unknown rather than borrow another region's price. Update the table, with its date, when prices move.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

PRICES_AS_OF = "2026-01-21"
# How job records name these figures (the provenance is above); a new table gets a new date here.
PRICES_SOURCE = f"on-demand-table {PRICES_AS_OF}"

REGIONS: tuple[str, ...] = (
    "us-east-1",
    "us-east-2",
    "us-west-2",
    "eu-west-1",
    "eu-central-1",
    "ap-northeast-1",
)

# instance type -> one price per region of REGIONS, in that order (None: no published figure there).
_TABLE: dict[str, tuple[float | None, ...]] = {
    "g4dn.xlarge": (0.526, 0.526, 0.526, 0.587, 0.658, 0.71),
    "g4dn.2xlarge": (0.752, 0.752, 0.752, 0.838, 0.94, 1.015),
    "g4dn.4xlarge": (1.204, 1.204, 1.204, 1.342, 1.505, 1.625),
    "g4dn.8xlarge": (2.176, 2.176, 2.176, 2.426, 2.72, 2.938),
    "g4dn.12xlarge": (3.912, 3.912, 3.912, 4.362, 4.89, 5.281),
    "g4dn.16xlarge": (4.352, 4.352, 4.352, 4.853, 5.44, 5.875),
    "g4dn.metal": (7.824, 7.824, 7.824, 8.724, 9.78, 10.562),
    "g5.xlarge": (1.006, 1.006, 1.006, 1.123, 1.258, 1.459),
    "g5.2xlarge": (1.212, 1.212, 1.212, 1.35296, 1.5156, 1.75776),
    "g5.4xlarge": (1.624, 1.624, 1.624, 1.81287, 2.03081, 2.35528),
    "g5.8xlarge": (2.448, 2.448, 2.448, 2.73271, 3.06122, 3.55033),
    "g5.12xlarge": (5.672, 5.672, 5.672, 6.33167, 7.09282, 8.22609),
    "g5.16xlarge": (4.096, 4.096, 4.096, 4.57237, 5.12204, 5.94042),
    "g5.24xlarge": (8.144, 8.144, 8.144, 9.09117, 10.18405, 11.81123),
    "g5.48xlarge": (16.288, 16.288, 16.288, 18.18233, 20.3681, 23.62246),
    "g6.xlarge": (0.8048, 0.8048, 0.8048, None, 1.0064, 1.1672),
    "g6.2xlarge": (0.9776, 0.9776, 0.9776, None, 1.22249, 1.41781),
    "g6.4xlarge": (1.3232, 1.3232, 1.3232, None, 1.65466, 1.91903),
    "g6.8xlarge": (2.0144, 2.0144, 2.0144, None, 2.519, 2.92148),
    "g6.12xlarge": (4.6016, 4.6016, 4.6016, None, 5.75429, 6.67369),
    "g6.16xlarge": (3.3968, 3.3968, 3.3968, None, 4.24769, 4.92637),
    "g6.24xlarge": (6.6752, 6.6752, 6.6752, None, 8.34732, 9.68103),
    "g6.48xlarge": (13.3504, 13.3504, 13.3504, None, 16.69464, 19.36206),
    "g6e.xlarge": (1.861, 1.861, 1.861, None, 2.327, 2.699),
    "g6e.2xlarge": (2.24208, 2.24208, 2.24208, None, 2.8035, 3.25168),
    "g6e.4xlarge": (3.00424, 3.00424, 3.00424, None, 3.75651, 4.35703),
    "g6e.8xlarge": (4.52856, 4.52856, 4.52856, None, 5.66252, 6.56775),
    "g6e.12xlarge": (10.49264, 10.49264, 10.49264, None, 13.12002, 15.21742),
    "g6e.16xlarge": (7.57719, 7.57719, 7.57719, None, 9.47454, 10.98917),
    "g6e.24xlarge": (15.06559, 15.06559, 15.06559, None, 18.83806, 21.84956),
    "g6e.48xlarge": (30.13118, 30.13118, 30.13118, None, 37.67612, 43.69912),
    "p3.2xlarge": (3.06, 3.06, 3.06, 3.305, 3.823, 4.194),
    "p3.8xlarge": (12.24, 12.24, 12.24, 13.22, 15.292, 16.776),
    "p3.16xlarge": (24.48, 24.48, 24.48, 26.44, 30.584, 33.552),
    "p3dn.24xlarge": (31.212, None, 31.212, 33.711, None, 42.783),
    "p4d.24xlarge": (21.957642, 21.95764, 21.95764, 23.71569, 27.43298, 30.09784),
    "p4de.24xlarge": (27.44705, None, 27.44705, None, 34.29122, 37.6223),
    "p5.48xlarge": (55.04, 55.04, 55.04, None, None, 68.8),
}


def _column(index: int) -> Mapping[str, float]:
    prices = {name: row[index] for name, row in _TABLE.items()}
    return MappingProxyType({name: price for name, price in prices.items() if price is not None})


ON_DEMAND_USD_PER_HOUR: Mapping[str, Mapping[str, float]] = MappingProxyType(
    {region: _column(index) for index, region in enumerate(REGIONS)}
)
"""Region -> instance type -> on-demand USD per hour, for the regions and types with a published figure."""

"""How the report's charts become files: matplotlib figures built and saved with settings of their own.

Figures are built from :class:`matplotlib.figure.Figure` and saved through the Agg canvas: pyplot, its global
figure registry and the process's backend choice are never touched, so the charts can be drawn inside a server
(the dashboard) or beside code that uses pyplot. The settings that make the output byte-stable (the SVG id salt,
text as text, no dates) apply in an :func:`matplotlib.rc_context` around each chart's drawing and saving only.
The charts themselves: :mod:`spotrun.cli.report.timeline_chart` and :mod:`spotrun.cli.report.telemetry_charts`.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import matplotlib
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.typing import RcKeyType

from spotrun.control.views.report_model import JobReport

# Matplotlib's defaults but for these: stable ids (the salt), text kept as text (smaller, searchable, the page's
# font), no creation date; DejaVu Sans ships with matplotlib, so every machine draws the same glyphs.
_RC: dict[RcKeyType, Any] = {
    "svg.hashsalt": "spotrun-report",
    "svg.fonttype": "none",
    "font.family": "DejaVu Sans",
    "font.size": 9,
    "text.parse_math": False,  # a '$' in a name is a dollar sign, never mathtext
    "axes.spines.top": False,
    "axes.spines.right": False,
}
_SVG_METADATA = {"Date": None, "Creator": None, "Format": None, "Type": None}
_PNG_METADATA = {"Software": None}

Build = Callable[[JobReport], Figure | None]
"""A chart: the figure it draws of a report, or None when the report has nothing for it."""


@contextmanager
def _style() -> Iterator[None]:
    with matplotlib.rc_context(_RC):
        yield


def new_figure(width: float, height: float, rows: list[float]) -> tuple[Figure, list[Axes]]:
    """A figure of ``width`` x ``height`` inches with one panel per entry of ``rows`` (their relative heights),
    one above the other, sharing their x axis; on an Agg canvas of its own."""
    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)  # the figure's canvas: Agg, whatever backend the process chose
    axes = figure.subplots(len(rows), 1, sharex=True, gridspec_kw={"height_ratios": rows}, squeeze=False)
    return figure, [row[0] for row in axes]


_PROLOG = re.compile(r"\A.*?(?=<svg\b)", re.DOTALL)
_SIZE = re.compile(r'\s(?:width|height)="[^"]*pt"')
_NAMESPACES = re.compile(r'\sxmlns(?::xlink)?="[^"]*"')


def svg(build: Build, report: JobReport, prefix: str) -> str | None:
    """The chart ``build`` draws of ``report``, as an ``<svg>`` element for an HTML page; None when it has none.

    The XML prolog and DOCTYPE go (an HTML page holds the element, not a document), and so do the namespace
    declarations: the HTML parser puts an inline ``<svg>`` and its ``xlink:href`` in their namespaces by itself
    (https://html.spec.whatwg.org/multipage/parsing.html#adjust-foreign-attributes). Ids are prefixed, so that
    several charts in one page never share one; the fixed size gives way to the page's width (the viewBox stays).
    """
    buffer = io.StringIO()
    with _style():
        figure = build(report)
        if figure is None:
            return None
        figure.savefig(buffer, format="svg", metadata=_SVG_METADATA)
    text = _PROLOG.sub("", buffer.getvalue(), count=1)
    opening, rest = text.split(">", 1)
    opening = _NAMESPACES.sub("", _SIZE.sub("", opening))
    rest = rest.replace('id="', f'id="{prefix}-').replace('href="#', f'href="#{prefix}-')
    rest = rest.replace("url(#", f"url(#{prefix}-")
    return f'{opening} class="chart" role="img">{rest}'.strip()


def png(build: Build, report: JobReport, path: Path, dpi: int = 130) -> bool:
    """Write the chart ``build`` draws of ``report`` as a PNG at ``path``; False when it has none.

    No software tag is written, so the same report gives the same bytes.
    """
    with _style():
        figure = build(report)
        if figure is None:
            return False
        figure.savefig(path, format="png", dpi=dpi, metadata=_PNG_METADATA)
    return True

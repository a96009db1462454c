"""PNG plots of a report (matplotlib, Agg): cost over time against the plan, and each app's
end-to-end latency CDF against its SLO."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["cost_plot", "latency_cdf_plot", "write_plots"]


def _plt() -> Any:
    # matplotlib (about a second to import) loads only when a report draws its plots
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after use("Agg"): no display backend

    return plt


def cost_plot(report: dict[str, Any], path: Path) -> Path:
    """Observed billed USD/h per period, stacked by hardware, and the plan in force."""
    plt = _plt()
    fleet = report["fleet"]
    tl = fleet["timeline"]
    t0 = report["window"]["start"]
    fig, ax = plt.subplots(figsize=(8, 4))
    if tl:
        minutes = [(period["t"] - t0) / 60 for period in tl]
        hws = sorted({hw for period in tl for hw in period["by_hardware"]})
        ys = [[period["by_hardware"].get(hw, 0.0) for period in tl] for hw in hws]
        ax.stackplot(minutes, ys, labels=[f"{hw} (observed)" for hw in hws], step="post", alpha=0.7)
        planned = [period["planned_per_hour"] for period in tl]
        if any(value is not None for value in planned):
            ax.step(
                minutes,
                [math.nan if value is None else value for value in planned],
                where="post",
                color="k",
                lw=1.5,
                label="planned",
            )
    dev = fleet.get("deviation_steady")
    sub = f"steady state {dev:+.1%} vs plan" if dev is not None else "no steady-state figure"
    ax.set_title(f"Billed cost per hour ({fleet['source']}; {sub})")
    ax.set_xlabel(f"minutes since the window start (period {report['window']['period_s']} s)")
    ax.set_ylabel("USD / hour")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def latency_cdf_plot(app: str, figures: dict[str, Any], path: Path) -> Path:
    """The end-to-end latency CDF (histogram bucket edges) with the SLO."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    cdf = [(edge, fraction) for edge, fraction in figures["latency_cdf"] if edge is not None]
    if cdf:
        ax.step(
            [edge for edge, _ in cdf],
            [fraction for _, fraction in cdf],
            where="post",
            label="frames at or below (bucket edges)",
        )
    if figures.get("slo_s"):
        ax.axvline(figures["slo_s"] * 1e3, color="r", ls="--", label=f"SLO {figures['slo_s'] * 1e3:.0f} ms")
    att = figures.get("slo_attainment")
    ax.set_title(f"{app}: end-to-end latency" + (f" (SLO attainment {att:.2%})" if att is not None else ""))
    ax.set_xscale("log")
    ax.set_xlabel("latency (ms)")
    ax.set_ylabel("fraction of done frames")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3, which="both")
    if not cdf:  # no frame finished in the window
        ax.text(
            0.5, 0.5, "no finished frames in the window", ha="center", va="center", transform=ax.transAxes
        )
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_plots(report: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    """Every plot of the report into ``out_dir``: ``cost.png`` and ``latency_cdf_<app>.png``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"cost": cost_plot(report, out_dir / "cost.png")}
    for app, figures in report["apps"].items():
        paths[f"latency_cdf_{app}"] = latency_cdf_plot(app, figures, out_dir / f"latency_cdf_{app}.png")
    return paths

"""One self-contained HTML page to look at what models recommend (``metricbert report``).

Numbers say how well a model ranks; only the recommendations themselves show what it does. The
page puts both in one file that opens from disk with no network and no server: the metrics
table, the plots (PNG inlined as base64), and for every annotated seed its top-k items under each
model side by side, annotated items marked, with the rank every model gives each annotated item.
A search box filters the seeds by title or id. Style and script are inline; nothing is fetched.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from metricbert_trainer.data.catalog import Catalog
from metricbert_trainer.evaluation.evaluator import SeedRanking

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5rem; color: #222; }
table { border-collapse: collapse; margin: 0.5rem 0 1rem; font-size: 0.9rem; }
th, td { border: 1px solid #ccc; padding: 0.25rem 0.5rem; }
td.number { text-align: right; font-variant-numeric: tabular-nums; }
img { max-width: 100%; }
#search { font-size: 1rem; padding: 0.3rem; width: 24rem; }
section.seed { border-top: 2px solid #888; margin-top: 1.5rem; }
section.seed[hidden] { display: none; }
.columns { display: flex; gap: 1rem; overflow-x: auto; }
.columns > div { flex: 1 1 0; min-width: 16rem; }
li.annotated { background: #fff3bf; font-weight: 600; }
li.annotated::before { content: "\\2605 "; color: #c28a00; }
.muted { color: #666; font-size: 0.85rem; }
"""

_SCRIPT = """
const search = document.getElementById("search");
const seeds = Array.from(document.querySelectorAll("section.seed"));
const count = document.getElementById("shown");
function filterSeeds() {
  const query = search.value.trim().toLowerCase();
  let shown = 0;
  for (const seed of seeds) {
    const match = query === "" || seed.dataset.search.includes(query);
    seed.hidden = !match;
    if (match) shown += 1;
  }
  count.textContent = shown + " of " + seeds.length + " seeds";
  const first = seeds.find((seed) => !seed.hidden);
  if (query !== "" && first) first.scrollIntoView();
}
search.addEventListener("input", filterSeeds);
filterSeeds();
"""


@dataclass(frozen=True)
class ScorerView:
    """One model or baseline on the page: its name and each seed's ranking (``seed_rankings``)."""

    name: str
    rankings: Sequence[SeedRanking]


def render_report(
    *,
    title: str,
    catalog: Catalog,
    similar: dict[int, Sequence[int]],
    table: tuple[Sequence[str], Sequence[Sequence[str]]],
    scorers: Sequence[ScorerView],
    plots: Sequence[tuple[str, bytes]] = (),
) -> str:
    """The page: ``table`` is the metrics table's headers and rows (formatted cells), ``similar``
    each seed's annotated items, ``plots`` captions and PNG bytes."""
    headers, rows = table
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_text(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{_text(title)}</h1>",
        '<h2>Metrics</h2><table id="metrics"><thead><tr>',
        *(f"<th>{_text(header)}</th>" for header in headers),
        "</tr></thead><tbody>",
    ]
    for row in rows:
        label, *values = row
        parts.append(f"<tr><td>{_text(label)}</td>")
        parts.extend(f'<td class="number">{_text(value)}</td>' for value in values)
        parts.append("</tr>")
    parts.append("</tbody></table>")
    parts.append('<p class="muted">Filtered and raw metrics in percent (docs/evaluation.md).</p>')
    for caption, png in plots:
        encoded = base64.b64encode(png).decode("ascii")
        parts.append(f'<figure><img alt="{_text(caption)}" src="data:image/png;base64,{encoded}">')
        parts.append(f"<figcaption>{_text(caption)}</figcaption></figure>")
    parts.append('<h2>Recommendations</h2><p><label>Find a seed: <input id="search" type="search" ')
    parts.append('placeholder="title or id"></label> <span id="shown" class="muted"></span></p>')
    items = _Items(catalog.ids, catalog.display_titles, catalog.texts(catalog.fields[-1]))
    for index, seed in enumerate(ranking.seed for ranking in scorers[0].rankings):
        rankings = [(view.name, view.rankings[index]) for view in scorers]
        parts.append(_seed_section(items, seed, similar[seed], rankings))
    parts.append(f"<script>{_SCRIPT}</script></body></html>")
    return "\n".join(parts) + "\n"


class _Items(NamedTuple):
    """The catalog's columns the page shows, read once."""

    ids: list[str]
    titles: list[str]
    descriptions: list[str]


def _seed_section(
    items: _Items, seed: int, annotated: Sequence[int], rankings: Sequence[tuple[str, SeedRanking]]
) -> str:
    """A seed's block: its item, its annotated items' ranks per scorer, then each scorer's top items."""
    title, item_id = items.titles[seed], items.ids[seed]
    parts = [
        f'<section class="seed" id="seed-{_text(item_id)}" data-search="{_text(f"{item_id} {title}".lower())}">',
        f'<h3>{_text(title)} <span class="muted">id {_text(item_id)}</span></h3>',
        f'<p class="muted">{_text(_snippet(items.descriptions[seed]))}</p>',
        '<table class="annotated-ranks"><thead><tr><th>annotated item</th>',
        *(f"<th>rank: {_text(name)}</th>" for name, _ in rankings),
        "</tr></thead><tbody>",
    ]
    for position, item in enumerate(annotated):
        parts.append(f"<tr><td>{_text(items.titles[item])}</td>")
        parts.extend(
            f'<td class="number">{ranking.annotated_ranks[position]:g}</td>' for _, ranking in rankings
        )
        parts.append("</tr>")
    parts.append('</tbody></table><div class="columns">')
    marked = set(annotated)
    for name, ranking in rankings:
        parts.append(f"<div><h4>{_text(name)}</h4><ol>")
        for item in ranking.top:
            css = ' class="annotated"' if int(item) in marked else ""
            parts.append(f"<li{css}>{_text(items.titles[item])}</li>")
        parts.append("</ol></div>")
    parts.append("</div></section>")
    return "\n".join(parts)


def _snippet(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " ..."


def _text(value: object) -> str:
    return html.escape(str(value), quote=True)

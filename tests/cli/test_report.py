"""``metricbert report``: the page's numbers and recommendations, then the page in a real browser."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from metricbert_trainer.cli import main
from metricbert_trainer.data.annotations import load_annotations
from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.evaluation.evaluator import evaluate_scorer
from metricbert_trainer.evaluation.metrics import annotated_ranks
from metricbert_trainer.evaluation.scorers import TfidfScorer

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Headless, and nothing that reaches for the network (the page must need none).
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="module")
def report(files, tiny_model_path, tmp_path_factory) -> Path:
    output = tmp_path_factory.mktemp("report") / "report.html"
    arguments = ["--catalog", str(files / "wines.csv"), "--annotations", str(files / "annotations.csv")]
    arguments += ["--baselines", "tfidf", "--models", f"tiny={tiny_model_path}", "--modes", "metric_inf"]
    assert main(["report", *arguments, "--max-length", "64", "--top-k", "5", "--output", str(output)]) == 0
    return output


@pytest.fixture(scope="module")
def tfidf(files):
    """What the library computes for the TF-IDF baseline on the same files."""
    catalog = load_catalog(files / "wines.csv")
    annotations = load_annotations(files / "annotations.csv", catalog)
    scorer = TfidfScorer()
    rows = scorer.distance_rows(catalog, annotations.seeds)
    ranks = {
        seed: annotated_ranks(row, seed, annotations.similar[seed])[0].ranks
        for row, seed in zip(rows, annotations.seeds, strict=True)
    }
    return catalog, annotations, evaluate_scorer(scorer, catalog, annotations), ranks


def test_the_page_is_one_self_contained_file(report):
    page = report.read_text(encoding="utf-8")
    # Everything inline: no address the browser would fetch, the chart as a data URI.
    assert not re.findall(r'(?:src|href)="(?!data:|#)', page)
    assert "http://" not in page and "https://" not in page
    assert page.count('src="data:image/png;base64,') == 1


def test_the_page_shows_the_computed_metrics_recommendations_and_ranks(report, tfidf):
    catalog, annotations, metrics, ranks = tfidf
    page = report.read_text(encoding="utf-8")
    row = page.split("<td>TF-IDF")[1].split("</tr>")[0]
    cells = re.findall(r'<td class="number">([^<]+)</td>', row)
    assert cells[:4] == [f"{metrics[name]:.1f}" for name in ("mpr", "mrr", "hr@10", "hr@100")]
    assert page.count('<section class="seed"') == len(annotations.seeds)
    for seed in annotations.seeds:
        section = page.split(f'id="seed-{catalog.ids[seed]}"')[1].split("</section>")[0]
        rank_rows = section.split("<tbody>")[1].split("</tbody>")[0].split("</tr>")[:-1]
        # Per annotated item, its rank under each scorer; TF-IDF's column is the first.
        assert [re.findall(r'"number">([^<]+)<', line)[0] for line in rank_rows] == [
            f"{rank:g}" for rank in ranks[seed]
        ]
        lists = re.findall(r"<ol>(.*?)</ol>", section, flags=re.S)
        assert len(lists) == 2 and all(part.count("<li") == 5 for part in lists)
        marked = sum(1 for rank in ranks[seed] if rank <= 5)
        assert lists[0].count('class="annotated"') == marked


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine (apt-get install chromium)")
def test_the_page_works_in_a_headless_browser(report, tfidf):
    playwright = pytest.importorskip("playwright.sync_api")
    catalog, annotations, metrics, _ = tfidf
    problems: list[str] = []
    with playwright.sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.on(
                "console", lambda message: problems.append(message.text) if message.type == "error" else None
            )
            page.on("pageerror", lambda error: problems.append(str(error)))
            page.on(
                "request",
                lambda request: (
                    problems.append(f"fetched {request.url}") if request.url != report.as_uri() else None
                ),
            )
            page.goto(report.as_uri())
            table = page.inner_text("#metrics")
            assert f"{metrics['mpr']:.1f}" in table and f"{metrics['raw_mpr']:.1f}" in table
            sections = page.locator("section.seed")
            assert sections.count() == len(annotations.seeds)
            assert page.inner_text("#shown") == f"{len(annotations.seeds)} of {len(annotations.seeds)} seeds"
            seed = annotations.seeds[-1]
            page.fill("#search", catalog.display_titles[seed][:25])
            visible = page.locator("section.seed:visible")
            assert visible.count() == 1
            assert visible.first.get_attribute("id") == f"seed-{catalog.ids[seed]}"
            page.fill("#search", catalog.ids[annotations.seeds[0]])
            assert (
                page.locator("section.seed:visible").first.get_attribute("id")
                == f"seed-{catalog.ids[annotations.seeds[0]]}"
            )
            page.fill("#search", "")
            assert page.locator("section.seed:visible").count() == len(annotations.seeds)
        finally:
            browser.close()
    assert problems == []

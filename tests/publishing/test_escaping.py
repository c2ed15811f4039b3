"""Text a user chooses (a model's folder name, a dataset name, column names, NAME=PATH labels,
catalog titles and ids) reaches the markdown and HTML the package writes only escaped: each output
is rendered by a real parser and searched for the elements the payloads would create (issue #38,
family 4; the card's code snippets: test_publishing.py)."""

from __future__ import annotations

from html.parser import HTMLParser

import pandas as pd
import pytest
from conftest import CLI_SEEDS
from markdown_it import MarkdownIt

from metricbert_trainer.cli import main as metricbert
from metricbert_trainer.metricbert.trainer import MetricBertTrainer
from metricbert_trainer.ner.trainer import NerTrainer
from metricbert_trainer.publishing.model_card import ModelCardInfo, render_model_card
from metricbert_trainer.recobert.trainer import RecoBertTrainer

PAYLOAD = "<img src=x onerror=alert(1)> *bold* [link](https://evil.example) `code` <script>alert(2)</script>"
# NAME=PATH labels end at the first "=" and hold no "/": the same attacks, spelt without them.
NAME_PAYLOAD = "<img src onerror> *bold* [link](https:evil.example) `code` <b>"


class Elements(HTMLParser):
    """The tags of an HTML document, with their attributes, and its text."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)

    def names(self) -> set[str]:
        return {tag for tag, _ in self.tags}


def rendered(markdown: str) -> Elements:
    return Elements(MarkdownIt("commonmark").enable("table").render(markdown))


def assert_inert(elements: Elements, allowed_links: tuple[str, ...] = ()) -> None:
    """No element the payload would create: no image or script, no link but the allowed ones, and
    its ``*bold*`` and backticks left as characters (not emphasis, not code)."""
    assert not elements.names() & {"img", "script", "strong"}, elements.names()
    links = [attrs.get("href", "") for tag, attrs in elements.tags if tag == "a"]
    assert all(link.startswith(allowed_links) for link in links), links
    text = "".join(elements.text)
    assert "*bold*" in text and "`code`" in text


@pytest.mark.parametrize("trainer", [MetricBertTrainer, RecoBertTrainer, NerTrainer])
def test_a_card_shows_every_users_name_as_text(trainer):
    info = ModelCardInfo(
        base_model=f"org/{PAYLOAD}", dataset_name=PAYLOAD, text_fields=(PAYLOAD, "description")
    )
    card = render_model_card(
        info=info,
        model_name=PAYLOAD,
        method=trainer.card_method,
        repo_id=None,
        objective_section="",
        hyperparameters={"run_name": PAYLOAD},
        log_history=[],
        trainer_tags=list(trainer._tag_names),
    )
    body = card.split("\n---\n", 1)[1]  # the YAML header is huggingface_hub's to quote
    elements = rendered(body)
    assert_inert(elements, allowed_links=("https://huggingface.co/",))
    text = "".join(elements.text)
    assert PAYLOAD in text  # the heading, the summary and the settings table show it as written


def test_results_md_shows_a_models_name_as_text(files, tiny_model_path, tmp_path):
    code = metricbert(
        [
            "compare",
            "--catalog",
            str(files / "wines.csv"),
            "--annotations",
            str(files / "annotations.csv"),
            "--models",
            f"{NAME_PAYLOAD}={tiny_model_path}",
            "--max-length",
            "32",
            "--output-dir",
            str(tmp_path),
        ]
    )
    assert code == 0
    elements = rendered((tmp_path / "results.md").read_text(encoding="utf-8"))
    assert_inert(elements)
    assert NAME_PAYLOAD in "".join(elements.text)


def test_the_report_page_shows_titles_and_ids_as_text(files, tmp_path):
    frame = pd.read_csv(files / "wines.csv", dtype=str)
    shown = CLI_SEEDS[0][0]  # an annotated recommendation, so the page lists it
    frame.loc[shown, "title"] = PAYLOAD
    catalog = tmp_path / "hostile.csv"
    frame.to_csv(catalog, index=False)
    page = tmp_path / "report.html"
    arguments = ["report", "--catalog", str(catalog), "--annotations", str(files / "annotations.csv")]
    assert metricbert([*arguments, "--baselines", "tfidf", "--output", str(page)]) == 0
    raw = page.read_text(encoding="utf-8")
    # Escaped wherever it is: as entities in the HTML, as JSON escapes in a script's data.
    assert "<img src=x" not in raw and "<script>alert(2)" not in raw and "alert(2)</script>" not in raw
    elements = Elements(raw)
    assert PAYLOAD in "".join(elements.text)  # and shown, as the text it is
    # The page's own images are its plots (data URLs); none comes from the payload.
    assert not any(
        tag == "img" and attrs.get("src") == "x" or "onerror" in attrs for tag, attrs in elements.tags
    )


def test_a_line_break_in_a_name_leaves_the_cards_lines_and_shell_word_whole():
    """Issue #90: an output folder named with a line break and a `---` line broke the card's shell
    snippet, the line before the `---` becoming a heading. The card has the headings a plain
    name's card has; the shell word is bash's $'...' on one line, which bash reads back as the name."""
    import re
    import subprocess

    def card_of(name: str) -> str:
        card = render_model_card(
            info=ModelCardInfo(dataset_name=name),
            model_name=name,
            method=MetricBertTrainer.card_method,
            repo_id=None,
            objective_section="",
            hyperparameters={},
            log_history=[],
            trainer_tags=list(MetricBertTrainer._tag_names),
        )
        return card.split("\n---\n", 1)[1]  # the YAML header is huggingface_hub's to quote

    def headings(body: str) -> list[str]:
        return re.findall(r"<(h[1-6])>", MarkdownIt("commonmark").enable("table").render(body))

    name = "run\n---\n# owned"
    body = card_of(name)
    assert headings(body) == headings(card_of("run"))
    (line,) = re.findall(r"`+ ?accelerate launch \S+ --model_name_or_path (.*?) ?`+", body)
    assert subprocess.run(["bash", "-c", f"printf %s {line}"], capture_output=True, text=True).stdout == name

"""Fetches the PyPI projects the PyPI benchmark is built from: a random sample of the index's
project names and, for each, the metadata of its latest release (PyPI's JSON API).

The sample is drawn with a fixed random seed from the names of the simple index, sorted; each
project's line of the output JSON Lines file holds the name, the version, the summary, the
long description and its content type, the classifiers and the upload time of the release's
first file, or ``"missing": true`` when the API had no such project. A line already in the file
is not fetched again, so an interrupted fetch goes on where it stopped.

    python data/pypi/fetch_projects.py --output /tmp/pypi-projects.jsonl   # 28 minutes on 2 cores (parsing the JSON keeps both busy)
"""

from __future__ import annotations

import argparse
import json
import random
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

INDEX = "https://pypi.org/simple/"
PROJECT_JSON = "https://pypi.org/pypi/{name}/json"
SAMPLE = 30_000
# Names of the simple index's HTML page: each project is an anchor to its normalised name.
INDEX_NAME = re.compile(r'<a href="([^"/]+)/">')
KEPT_FIELDS = ("name", "version", "summary", "description", "description_content_type", "classifiers")


def index_names(html: str) -> list[str]:
    """The normalised project names of the simple index's HTML page, sorted."""
    return sorted(set(INDEX_NAME.findall(html)))


def sample_names(names: list[str], size: int, seed: int) -> list[str]:
    """``size`` of ``names`` drawn at random with ``seed`` (the same names for the same index)."""
    return random.Random(seed).sample(names, min(size, len(names)))


def project_record(name: str, payload: dict | None) -> dict:
    """The line kept for one project: the fields of ``KEPT_FIELDS`` and the upload time, or a
    record saying the API had no such project."""
    if payload is None:
        return {"name": name, "missing": True}
    info = payload["info"]
    files = payload.get("urls") or []
    return {
        **{field: info.get(field) for field in KEPT_FIELDS},
        "index_name": name,
        "upload_time": files[0].get("upload_time_iso_8601") if files else None,
    }


def fetch_json(url: str, timeout: float = 30.0, attempts: int = 3) -> dict | None:
    """The JSON at ``url``, ``None`` on a 404; other failures are retried, then raised."""
    for attempt in range(attempts):
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                return json.load(response)
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return None
            if attempt == attempts - 1:
                raise
        except (urllib.error.URLError, TimeoutError):
            if attempt == attempts - 1:
                raise
    return None


def index_name(record: dict) -> str:
    """The index name a line of the output stands for (a missing project's line names it ``name``)."""
    return record.get("index_name") or record["name"]


def already_fetched(output: Path) -> set[str]:
    if not output.is_file():
        return set()
    with output.open(encoding="utf-8") as lines:
        return {index_name(json.loads(line)) for line in lines if line.strip()}


def fetch_records(names: list[str], threads: int) -> Iterator[dict]:
    def fetch(name: str) -> dict:
        return project_record(name, fetch_json(PROJECT_JSON.format(name=name)))

    with ThreadPoolExecutor(threads) as pool:
        yield from pool.map(fetch, names)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--output", type=Path, required=True, help="the JSON Lines file to write (or complete)"
    )
    parser.add_argument("--sample", type=int, default=SAMPLE, help="project names drawn from the index")
    parser.add_argument("--seed", type=int, default=0, help="draws the names")
    parser.add_argument("--threads", type=int, default=16, help="requests in flight")
    options = parser.parse_args(argv)
    with urllib.request.urlopen(INDEX, timeout=120) as response:
        names = index_names(response.read().decode("utf-8"))
    drawn = sample_names(names, options.sample, options.seed)
    done = already_fetched(options.output)
    todo = [name for name in drawn if name not in done]
    print(f"{len(names)} names in the index, {len(drawn)} drawn, {len(todo)} to fetch.", flush=True)
    with options.output.open("a", encoding="utf-8") as output:
        for count, record in enumerate(fetch_records(todo, options.threads), start=1):
            output.write(json.dumps(record, ensure_ascii=False) + "\n")
            if count % 1000 == 0:
                output.flush()
                print(f"{count} of {len(todo)} fetched.", flush=True)


if __name__ == "__main__":
    main()

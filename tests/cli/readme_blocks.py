"""The ``privlm`` lines of the README's and docs/service.md's shell blocks, in order, and
how a test runs them at tiny sizes: the public model becomes ``tiny``, sizes shrink, and
every line that cannot run here is skipped for a stated reason (a GPU, the network, a
server, the benchmark corpora where they are absent). The one other change is
:data:`TINY_MODEL`'s, for what the tiny model cannot do (its teachers reach no consensus)."""

from __future__ import annotations

import csv
import gzip
import json
import os
import re
import shlex
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import click
import typer.main

from privlm.cli import app

ROOT = Path(__file__).resolve().parents[2]
DOCS = (ROOT / "README.md", ROOT / "docs" / "service.md")
BLOCK = re.compile(r"```sh\n(.*?)```", re.S)
PROGRAM = ".venv/bin/privlm"

# option → the value it takes at tiny sizes (the README's are sized for SmolLM2-135M)
TINY = {
    "--count": "4",
    "--max-tokens": "4",
    "--parts": "8",
    "--prompt-tokens": "32",
    "--paid-tokens": "8",
    "--n": "40",
    "--generations": "10",
    "--blocks": "2",
    "--public": "30",
    "--prompts": "4",
}
# options added where the command takes them and the line leaves them to their default
TINY_DEFAULTS = {
    "generate": {"--max-new-tokens": "4"},
    "synth": {"--max-tokens": "4"},
    "prompt": {"--test": "20"},  # of a benchmark corpus's test split: 200
    "detect": {"--limit": "20"},  # of a corpus's thousands of sentences
}
# options a line gets on the tiny model only, and why: not a size, a model's quality
TINY_MODEL = {
    "prompt": {"--threshold": "0"},  # tiny's teachers vote at random: no consensus reaches 60
}
# why a line is not run here: the first pattern that matches names the reason
SKIPS = (
    (r"--device cuda|^PRIVLM_DEVICE=cuda", "needs a GPU"),
    (r" serve\b", "starts a server (tests/service/test_docs.py runs the service's docs)"),
    (r" quickstart\b", "the real model on WikiText-2 (make demo runs it)"),
    (r" models prepare\b", "converts the real model (the suite's model fixtures do)"),
    (r" data fetch\b", "downloads a corpus"),
)
# run where the benchmark corpora are present (PRIVLM_DATA or ../shared/data), else skipped
CORPUS = (r"--task sst2|--corpus ", "the benchmark corpora are not present")


@dataclass(frozen=True)
class Line:
    """One ``privlm`` command of a doc, as written and as a test runs it."""

    doc: str
    written: str
    args: tuple[str, ...]
    skip: str | None


def doc_commands(doc: Path) -> Iterator[str]:
    """Each ``privlm`` statement of ``doc``'s shell blocks, continuation lines joined."""
    for block in BLOCK.findall(doc.read_text()):
        for statement in block.replace("\\\n", " ").splitlines():
            if PROGRAM + " " in statement.split("#")[0]:
                yield statement.strip()


def lines() -> list[Line]:
    """Every documented ``privlm`` line, in the docs' order, ready to run."""
    out = []
    for doc in DOCS:
        for written in doc_commands(doc):
            words = shlex.split(written, comments=True)
            args = tuple(words[words.index(PROGRAM) + 1 :])
            skip = next((why for pat, why in skips() if re.search(pat, written)), None)
            out.append(Line(doc.name, written, tiny(args), skip))
    return out


def skips() -> tuple[tuple[str, str], ...]:
    """:data:`SKIPS`, and :data:`CORPUS` where the corpora are missing."""
    from privlm.data import corpora

    return SKIPS if all(corpora.available().values()) else (*SKIPS, CORPUS)


def tiny(args: tuple[str, ...]) -> tuple[str, ...]:
    """``args`` on the tiny model at tiny sizes."""
    words = list(args)
    for i in range(1, len(words)):
        if words[i - 1] == "--model":
            words[i] = "tiny"
        if words[i].isdigit():  # a size, not a mode such as --count auto
            words[i] = TINY.get(words[i - 1], words[i])
    options = option_names(tuple(words))
    brings_a_model = {"--model", "--ensemble", "--adapter-dir"} & set(words)
    if "--model" in options and not brings_a_model:
        words += ["--model", "tiny"]
    defaults = {} if "--task-file" in words else TINY_DEFAULTS.get(words[0], {})
    for option, value in {**defaults, **TINY_MODEL.get(words[0], {})}.items():
        if option in options and option not in words:
            words += [option, value]
    return tuple(words)


def option_names(args: tuple[str, ...]) -> set[str]:
    """The options of the (sub)command that ``args`` call."""
    command: click.Command = typer.main.get_command(app)
    for word in args:
        sub = getattr(command, "commands", {}).get(word)
        if sub is None:
            break
        command = sub
    return {o for p in command.params for o in p.opts}


def write_user_files(folder: Path) -> None:
    """The files the docs' lines read, as a user would have them (small)."""
    notes = [f"patient {i} was seen on monday and feels better today" for i in range(119)]
    notes.insert(60, "my locker code is 703518")  # the README's planted canary
    (folder / "notes.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in notes))
    people = ("Alice Jones", "Bob Smith", "Carol White", "Dan Brown")
    jft = [
        f"{people[i % 4]} called on {1 + i % 28} May about ticket AB{1000 + i}" for i in range(120)
    ]
    (folder / "notes.txt").write_text("\n".join(jft) + "\n")
    (folder / "sanitised.txt").write_text(
        "\n".join(f"a customer called on a day in May about a ticket, case {i}" for i in range(20))
    )
    annotated = [  # each with a secret no detector knows: light noise calibrates on misses
        {"text": f"{t}; her dog is called {dog}", "secrets": [people[i % 4], f"AB{1000 + i}", dog]}
        for i, (t, dog) in enumerate(zip(jft[:20], DOGS * 5, strict=True))
    ]
    for name in ("annotated.jsonl", "sample.jsonl"):
        (folder / name).write_text("".join(json.dumps(a) + "\n" for a in annotated))
    (folder / "rules.yaml").write_text(
        'patterns:\n  - {label: TICKET, regex: "AB\\\\d{4}"}\n'
        "deny:\n  - {label: PROJECT, terms: [Falcon]}\n"
        "allow:\n  - {label: PRODUCT, terms: [Acme Cloud]}\n"
    )
    reviews = [("a fine film, warm and funny", "positive"), ("a dull and tired plot", "negative")]
    with open(folder / "reviews.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["text", "label"])
        w.writerows((f"{t} ({i})", label) for i in range(20) for t, label in reviews)
    write_tickets(folder)
    held_out = [f"the patient {i} feels better after the visit" for i in range(40)]
    (folder / "held_out.jsonl").write_text(
        "".join(json.dumps({"text": t}) + "\n" for t in held_out)
    )
    with gzip.open(folder / "held_out.csv.gz", "wt", newline="") as g:
        csv.writer(g).writerows((f"u{i}", t) for i, t in enumerate(held_out))


DOGS = ("tulip", "biscuit", "pepper", "maple")
TOPICS = {
    "billing": "my invoice is wrong",
    "outage": "the site is down",
    "account": "I cannot log in",
}


def write_tickets(folder: Path) -> None:
    """``tickets.yaml`` as the README writes it, its private and test data, public inputs."""
    (yaml,) = re.findall(r"```yaml\n(# tickets.yaml\n.*?)```", DOCS[0].read_text(), re.S)
    (folder / "tickets.yaml").write_text(yaml)
    topics = list(TOPICS)
    rows = [
        (f"{TOPICS[topics[i % 3]]}, ticket {i}", topics[i % 3], f"c{i % 120}", ("mail", "chat")[i % 2])
        for i in range(150)
    ]  # fmt: skip
    for name, part in (("tickets.csv", rows[:130]), ("held_out.csv", rows[130:])):
        with open(folder / name, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["body", "topic", "customer", "via"])
            w.writerows(part)
    about = list(TOPICS.values())
    headlines = [{"text": f"headline {i}: {about[i % 3]}", "channel": "news"} for i in range(30)]
    (folder / "headlines.jsonl").write_text("".join(json.dumps(h) + "\n" for h in headlines))


def run_in_order(folder: Path) -> list[dict[str, object]]:
    """Each doc's lines in order, in a folder of its own under ``folder`` that holds the
    user's files: what each answered, how long it took, or why it did not run."""
    from typer.testing import CliRunner

    runner, report, here = CliRunner(), [], Path.cwd()
    for doc in DOCS:
        work = folder / doc.stem
        work.mkdir(parents=True, exist_ok=True)
        write_user_files(work)
        os.chdir(work)
        try:
            for line in (li for li in lines() if li.doc == doc.name):
                entry: dict[str, object] = {"doc": line.doc, "written": line.written}
                if line.skip:
                    report.append({**entry, "skipped": line.skip})
                    continue
                start = time.perf_counter()
                res = runner.invoke(app, list(line.args))
                report.append({**entry, "args": list(line.args), "exit_code": res.exit_code,
                               "seconds": round(time.perf_counter() - start, 2),
                               "output": res.output})  # fmt: skip
                print(f"{res.exit_code} {report[-1]['seconds']:6.1f} s  {line.written}",
                      file=sys.__stderr__, flush=True)  # fmt: skip
        finally:
            os.chdir(here)
    return report


if __name__ == "__main__":  # python -m tests.cli.readme_blocks FOLDER: the report on stdout
    print(json.dumps(run_in_order(Path(sys.argv[1]).resolve())))

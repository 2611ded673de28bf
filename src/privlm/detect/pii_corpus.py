"""privlm's PII evaluation corpus: template sentences filled with values that
Faker generates from a seed, each value's character span recorded with its type.

The corpus is built on demand (``privlm detect corpus``, ``bench/bench_detectors.py``) and
never committed. ``held_out=True`` uses the other template set and a mix of locales (US and
UK names, addresses, postcodes and phone numbers) that no recogniser was developed against.
:func:`support_dialogues` builds multi-turn support chats, one persona per customer, for JFT
on dialogue data.
"""

from __future__ import annotations

import functools
import json
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from privlm.detect.annotated import AnnotatedText
from privlm.detect.base import Span
from privlm.detect.pii_templates import AGENT_TURNS, DEV, HELDOUT
from privlm.errors import PrivlmError

SLOT = re.compile(r"\{(\w+)(?::(lower))?\}")

# slot -> gold type; ``title`` is not PII (it only precedes a name)
SLOT_TYPES: dict[str, str | None] = {
    "person": "PERSON", "first": "PERSON", "last": "PERSON", "email": "EMAIL",
    "phone": "PHONE", "card": "CREDIT_CARD", "iban": "IBAN", "ssn": "SSN",
    "ip": "IP_ADDRESS", "address": "STREET_ADDRESS", "zip": "ZIP", "dob": "DATE_OF_BIRTH",
    "order_id": "ID", "account_id": "ID", "member_id": "ID", "ticket_id": "ID",
    "username": "USERNAME", "title": None,
}  # fmt: skip
STRUCTURED = ("EMAIL", "PHONE", "CREDIT_CARD", "IBAN", "SSN", "IP_ADDRESS", "STREET_ADDRESS",
              "ZIP", "ID")  # fmt: skip
DOB_FORMATS = ("%m/%d/%Y", "%B %d, %Y", "%Y-%m-%d", "%d %b %Y", "%m-%d-%Y", "%b %d %Y")
TITLES = ("Dr.", "Mr.", "Mrs.", "Ms.", "Dr", "Mr", "Mrs", "Ms", "Prof.", "Miss")


def _faker(locale: str, seed: int) -> Any:
    from privlm.extras import require

    require("detect", "the PII evaluation corpus (Faker)")
    from faker import Faker

    fake = Faker(locale)
    fake.seed_instance(seed)
    _fix_set_order(fake)
    return fake


# value lists Faker builds by iterating a set, so their order (and so a seeded draw) moves
# with Python's per-process hash seed: (provider module, attribute)
SET_ORDERED = (("faker.providers.address.it_IT", "cities"),)


def _fix_set_order(fake: Any) -> None:
    """Sort the lists :data:`SET_ORDERED` names on this instance, so that a seed gives the
    same sentences in every process (it_IT's cities came from a set: the held-out draws
    differed between runs by a few Italian towns)."""
    for provider in fake.providers:
        for module, attr in SET_ORDERED:
            if type(provider).__module__ == module and hasattr(provider, attr):
                setattr(provider, attr, sorted(getattr(provider, attr)))


def _id_value(kind: str, fake: Any, rng: random.Random) -> str:
    """The shapes support data has: prefixed, mixed letters and digits, or plain digits."""
    shapes = {
        "order_id": ("#########", "ORD-####-#####", "??#?##?#??", "#?#-####-??#", "########"),
        "account_id": ("##########", "??##?##?#?", "ACC-######", "####-####-##", "?#?#?#?#?#"),
        "member_id": ("???#######", "MBR######", "??#-###-###", "#########?", "W#########"),
        "ticket_id": ("#######", "TKT-######", "INC00#####", "CS-####-##", "#?##??#"),
    }[kind]
    value: str = fake.bothify(rng.choice(shapes), letters="ABCDEFGHJKLMNPQRSTUVWXYZ")
    if kind in ("order_id", "ticket_id") and value[0].isdigit() and rng.random() < 0.5:
        value = "#" + value
    return value


def _values(locale_fakers: list[Any], rng: random.Random) -> dict[str, Callable[[], str]]:
    def fake() -> Any:
        return rng.choice(locale_fakers)

    def address() -> str:
        f = fake()
        street = f.street_address().replace("\n", ", ")
        if f.locales[0] == "en_GB":
            return f"{street}, {f.city()} {f.postcode()}"
        return f"{street}, {f.city()}, {f.state_abbr()} {f.zipcode()}"

    def zip_code() -> str:
        f = fake()
        return str(f.postcode() if f.locales[0] == "en_GB" else f.zipcode())

    us = locale_fakers[0]
    return {
        "person": lambda: fake().name(),
        "first": lambda: fake().first_name(),
        "last": lambda: fake().last_name(),
        "email": lambda: fake().email(),
        "phone": lambda: fake().phone_number(),
        "card": lambda: us.credit_card_number(),
        "iban": lambda: us.iban(),
        "ssn": lambda: us.ssn(),
        "ip": lambda: us.ipv4_public() if rng.random() < 0.8 else us.ipv6(),
        "address": address,
        "zip": zip_code,
        "dob": lambda: us.date_of_birth(minimum_age=18, maximum_age=95).strftime(
            rng.choice(DOB_FORMATS)
        ),
        "username": lambda: fake().user_name(),
        "title": lambda: rng.choice(TITLES),
        "order_id": lambda: _id_value("order_id", us, rng),
        "account_id": lambda: _id_value("account_id", us, rng),
        "member_id": lambda: _id_value("member_id", us, rng),
        "ticket_id": lambda: _id_value("ticket_id", us, rng),
    }


def fill(
    template: str,
    values: dict[str, Callable[[], str]],
    slot_types: dict[str, str | None] | None = None,
) -> AnnotatedText:
    """One sentence from ``template`` with the span and type of each filled slot (types from
    ``slot_types``, by default :data:`SLOT_TYPES`)."""
    types = SLOT_TYPES if slot_types is None else slot_types
    text, spans, pos = "", [], 0
    for m in SLOT.finditer(template):
        slot, lower = m.group(1), m.group(2) is not None
        if slot not in values:
            raise PrivlmError(f"unknown slot {{{slot}}} in template {template!r}")
        text += template[pos : m.start()]
        value = values[slot]().strip()  # a generator's stray space is no secret
        value = value.lower() if lower else value
        kind = types[slot]
        if kind is not None:
            spans.append(Span(len(text), len(text) + len(value), kind))
        text += value
        pos = m.end()
    return AnnotatedText(text + template[pos:], tuple(spans))


def pii_corpus(n: int = 2000, seed: int = 0, held_out: bool = False) -> list[AnnotatedText]:
    """``n`` sentences, styles and templates drawn uniformly, values from Faker."""
    if n < 1:
        raise PrivlmError("the PII corpus needs at least one sentence")
    rng = random.Random(seed)
    locales = ("en_US", "en_GB") if held_out else ("en_US",)
    fakers = [_faker(loc, seed + i) for i, loc in enumerate(locales)]
    values = _values(fakers, rng)
    templates = HELDOUT if held_out else DEV
    styles = sorted(templates)
    return [fill(rng.choice(templates[rng.choice(styles)]), values) for _ in range(n)]


def _persona(values: dict[str, Callable[[], str]]) -> dict[str, Callable[[], str]]:
    """One customer: every slot drawn once, so the same name, e-mail, IDs and address recur
    in each of their turns (as they do in real support dialogues)."""
    drawn = {slot: draw() for slot, draw in values.items()}
    drawn["person"] = f"{drawn['first']} {drawn['last']}"
    return {slot: functools.partial(str, v) for slot, v in drawn.items()}


def support_dialogues(
    customers: int, seed: int = 0, turns: tuple[int, int] = (3, 5), held_out: bool = False
) -> list[list[AnnotatedText]]:
    """``customers`` support dialogues, each a list of turns: the customer's
    chat turns (the ``chat`` templates of both template sets, filled from one persona per
    customer), between ``turns[0]`` and ``turns[1]`` of them, each followed at random by an
    agent turn without personal data. Seeded like :func:`pii_corpus`."""
    lo, hi = turns
    if customers < 1 or not 1 <= lo <= hi:
        raise PrivlmError(
            "support dialogues need customers ≥ 1 and 1 ≤ turns[0] ≤ turns[1], "
            f"got {customers} and {turns}"
        )
    rng = random.Random(seed)
    locales = ("en_US", "en_GB") if held_out else ("en_US",)
    values = _values([_faker(loc, seed + i) for i, loc in enumerate(locales)], rng)
    chat = DEV["chat"] + HELDOUT["chat"]
    dialogues = []
    for _ in range(customers):
        persona = _persona(values)
        dialogue = []
        for template in rng.sample(chat, rng.randint(lo, hi)):
            dialogue.append(fill(template, persona))
            if rng.random() < 0.5:
                dialogue.append(AnnotatedText(rng.choice(AGENT_TURNS), ()))
        dialogues.append(dialogue)
    return dialogues


def join_turns(turns: list[AnnotatedText], sep: str = "\n") -> AnnotatedText:
    """A dialogue's turns as one text, each turn's spans moved to their place in it."""
    text, spans = "", []
    for turn in turns:
        text += sep if text else ""
        spans += [Span(s.start + len(text), s.end + len(text), s.label) for s in turn.sensitive]
        text += turn.text
    return AnnotatedText(text, tuple(spans))


def write_corpus(path: str | Path, texts: list[AnnotatedText]) -> Path:
    """Write the corpus in the annotated JSONL format :func:`load_annotated` reads."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as f:
        for t in texts:
            rows = [{"start": s.start, "end": s.end, "type": s.label} for s in t.sensitive]
            f.write(json.dumps({"text": t.text, "spans": rows}) + "\n")
    return out

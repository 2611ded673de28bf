"""Template families and value sources for measuring how well a detector *generalises*.

A detector developed against some templates and some value generators is measured on
families of templates written separately and on values from other generators, never used
while developing or training it (the split is by family and by value source, not by
sentence). The families here are the *development* side: a learned tagger is trained on
them, and rules are tuned on them. :mod:`privlm.detect.pii_families_heldout` holds the
held-out side, used only to measure (docs/results.md).

Slots are those of :mod:`privlm.detect.pii_corpus` plus ``street`` (a street line, without
city or postcode), ``city``, ``state``, ``country`` (gold type GPE), ``org`` and ``team``
(ORGANIZATION: a club, a town's name alone or with a club word), and the figures of a table
row, which are not personal (``score``, ``stats``, ``amount``).

Value sources: ``faker:<locale>`` draws every value from Faker in that locale (names,
streets and cities in that locale's forms; a slot the locale has no provider for falls back
to en_US). Not the US Census names of the ``names`` package: privlm's recognisers use them
as a gazetteer, so they can be neither a development source nor a held-out one.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Any

from privlm.detect.annotated import AnnotatedText
from privlm.detect.pii_corpus import SLOT_TYPES as BASE_SLOT_TYPES
from privlm.detect.pii_corpus import _faker, _values, fill
from privlm.detect.pii_templates import DEV
from privlm.errors import PrivlmError

GPE, ORG = "GPE", "ORGANIZATION"
SLOT_TYPES: dict[str, str | None] = {
    **BASE_SLOT_TYPES, "street": "STREET_ADDRESS", "city": GPE, "state": GPE, "country": GPE,
    "org": ORG, "team": ORG, "score": None, "stats": None, "amount": None,
}  # fmt: skip
CLUB_WORDS = ("United", "City", "Rovers", "Town", "Athletic", "Wanderers", "FC", "SC")

DEV_FAMILIES: dict[str, tuple[str, ...]] = {
    **{f"support-{style}": templates for style, templates in DEV.items()},
    "hr": (
        "Employee {person} transferred from the {city} office to {org} in {country}.",
        "New hire: {first} {last}, start date {dob}, home address {street}, {city}.",
        "{person} resigned; final paycheck mailed to {address}.",
        "Reference check for {person} with her manager at {org} ({phone}).",
        "Relocation approved for {title} {last}: moving from {city}, {state} to {city}.",
        "Payroll: update bank details of {person} to IBAN {iban}.",
        "{first} from the {city} team asked about parental leave.",
        "Candidate {person} currently works for {org} and lives in {city}.",
        "Exit interview with {person} scheduled; contact {email}.",
        "Visa sponsorship for {person}, citizen of {country}, passport on file.",
    ),
    "travel": (
        "Booking for {person}: flight from {city} to {city}, {country}, on {dob}.",
        "Hotel reservation under the name {last}, guest address {address}.",
        "Traveller {first} {last} needs a visa for {country}.",
        "Pick-up at {street} at 7am; driver will call {phone}.",
        "{title} {last} changed the return leg to depart from {city}.",
        "Group tour of {city} and {city} led by {person} of {org}.",
        "Lost luggage reported by {person}; deliver to {address} once found.",
        "Loyalty member {member_id} ({person}) upgraded on the {city} route.",
        "Itinerary sent to {email}: {city} → {city} → {country}.",
        "The guest in room 214, {person}, is from {state}.",
    ),
    "banking": (
        "Wire of $2,400 from {person} to {org}, {city}, {country}.",
        "Address on the account of {person} changed to {street}, {city} {zip}.",
        "Fraud alert: card {card} used in {city}, {country} while {first} was at home.",
        "Mortgage application: {person} and {person}, property at {address}.",
        "{org} opened a business account; signatory {title} {last}.",
        "Statement for {person} returned undeliverable from {address}.",
        "Branch manager {person} of the {city} branch approved the loan.",
        "Customer {first} {last} moved abroad to {country}; close account {account_id}.",
    ),
    "records": (
        "{person}, born in {city}, {country}, resident at {address}.",
        "Next of kin: {person} ({phone}), {street}, {city}, {state}.",
        "Name: {person}\nAddress: {street}\nCity: {city}\nCountry: {country}",
        "Registered to {last}, {first} at {address}; employer {org}.",
        "Witness {person} lives on {street} in {city}.",
        "The vehicle is owned by {person} of {city}, {state}.",
        "Delivered to {first} at {street}; signed by {person}.",
        "Applicant {person} has lived in {country} since 2009 and works at {org}.",
    ),
    # rows pasted from a spreadsheet, a league table or a results page: a name leads a line
    # of figures, with no word around it to say what it is (a bare town is GPE as {city} and
    # ORGANIZATION as a {team}: either way it is flagged, which is what redaction needs)
    "tables": (
        "{team} {score} {team} {score}",
        "{team} {stats}",
        "{org} {stats}",
        "{person} {stats}",
        "{city} {stats}",
        "{person} ({team}) {stats}",
        "{org} {amount} {amount}",
        "{last} {amount}",
        "{person}\t{org}\t{amount}",
        "{team} {score} ({last} {score}) {team} {score}",
    ),
}

# sentences without personal data, in the same registers: a tagger learns what not to flag
NO_PII: tuple[str, ...] = (
    "The meeting was moved to Thursday afternoon.",
    "Please restart the router and try again.",
    "Our office is closed on public holidays.",
    "The patient tolerated the procedure well.",
    "Thank you for your patience while we look into this.",
    "The Annual Report is attached for your review.",
    "We shipped the replacement part this morning.",
    "Blood pressure was stable throughout the night.",
    "The Board approved the new Budget in March.",
    "Your Password must contain at least eight characters.",
    "Monday Deliveries are delayed because of the Storm.",
    "Click Save, then Close the Window.",
)
# what leads a row of figures without naming anyone: a tagger that learns the "tables" family
# must also see rows like these, or it flags whatever word comes before a number
ROW_WORDS: tuple[str, ...] = (
    "Subtotal", "Balance", "Discount", "Deposit", "Refund", "Fee", "Labour", "Parts",
    "Freight", "Rent", "Electricity", "Internet", "Licence", "Overtime", "Mileage",
    "Temperature", "Pulse", "Glucose", "Weight", "Score", "Points", "Round", "Stage", "Lap",
    "Level", "Floor", "Desk", "Bed", "Line", "Order", "Qty", "Units", "Boxes", "Pallets",
    "Tickets", "Calls", "Open", "Closed", "Pending", "Resolved", "January", "Q1", "Played",
    "Blood pressure", "Oxygen saturation", "Late fee", "Service charge", "Spare parts",
    "Open tickets", "Travel expenses",
)  # fmt: skip

DEV_SOURCES = ("faker:en_US", "faker:en_GB", "faker:de_DE", "faker:fr_FR")


def _locale_values(locale: str, seed: int, rng: random.Random) -> dict[str, Callable[[], str]]:
    """Every slot's value generator for one Faker locale."""
    fake = _faker(locale, seed)
    values = _values([fake], rng)

    def street() -> str:
        return str(fake.street_address()).replace("\n", ", ")

    def address() -> str:
        return str(fake.address()).replace("\n", ", ")

    def state() -> str:
        for attr in ("state", "administrative_unit", "region", "county"):
            if hasattr(fake, attr):
                return str(getattr(fake, attr)())
        return str(fake.city())

    english = _faker("en_US", seed + 1)
    fallback = _values([english], rng)
    for slot, draw in list(values.items()):  # a locale without a provider: en_US's
        values[slot] = _or_else(draw, fallback[slot])
    values.update(
        street=street, address=address, city=lambda: str(fake.city()), state=state,
        country=lambda: str(english.country()), org=lambda: str(fake.company()),
        zip=lambda: str(fake.postcode()), **_table_values(fake, rng),
    )  # fmt: skip
    return values


def _table_values(fake: Any, rng: random.Random) -> dict[str, Callable[[], str]]:
    """A team (a town alone or with a club word) and the figures of a table row."""

    def team() -> str:
        town = str(fake.city())
        return town if rng.random() < 0.5 else f"{town} {rng.choice(CLUB_WORDS)}"

    def stats() -> str:
        figures = _counts(rng, 3, 7)
        if rng.random() < 0.3:
            figures.append(f".{rng.randint(100, 999)}")
        return " ".join(figures)

    return {
        "team": team, "score": lambda: str(rng.randint(0, 5)), "stats": stats,
        "amount": lambda: _amount(rng, 1),
    }  # fmt: skip


def _counts(rng: random.Random, fewest: int, most: int) -> list[str]:
    """Between ``fewest`` and ``most`` whole numbers under 100."""
    return [str(rng.randint(0, 99)) for _ in range(rng.randint(fewest, most))]


def _amount(rng: random.Random, low: float) -> str:
    """A sum of money between ``low`` and 5,000, as a table writes it ("1,204.50")."""
    return f"{rng.uniform(low, 5000):,.2f}"


def _or_else(draw: Callable[[], str], other: Callable[[], str]) -> Callable[[], str]:
    def value() -> str:
        try:
            return draw()
        except AttributeError:
            return other()

    return value


def source_values(source: str, seed: int, rng: random.Random) -> dict[str, Callable[[], str]]:
    if source.startswith("faker:"):
        return _locale_values(source.split(":", 1)[1], seed, rng)
    raise PrivlmError(f"unknown value source {source!r}")


def figures_row(rng: random.Random) -> str:
    """A row of figures led by a word of :data:`ROW_WORDS` (nothing in it is personal)."""
    if rng.random() < 0.5:
        figures = _counts(rng, 1, 6)
    else:
        figures = [_amount(rng, 0) for _ in range(rng.randint(1, 3))]
    return f"{rng.choice(ROW_WORDS)} {' '.join(figures)}"


def family_corpus(
    n: int,
    families: Mapping[str, tuple[str, ...]],
    sources: tuple[str, ...],
    seed: int = 0,
    negatives: float = 0.0,
    figure_rows: float = 0.0,
) -> list[AnnotatedText]:
    """``n`` sentences: a family, a template and a value source drawn uniformly for each.
    Two shares of sentences hold no personal data: ``negatives``, prose from
    :data:`NO_PII`, and ``figure_rows``, rows of figures led by a common word
    (:func:`figures_row`)."""
    if n < 1:
        raise PrivlmError("the corpus needs at least one sentence")
    if negatives < 0 or figure_rows < 0 or negatives + figure_rows > 1:
        raise PrivlmError(
            "the shares of negatives and figure rows are in [0, 1], summing to 1 at most"
        )
    rng = random.Random(seed)
    gens = {s: source_values(s, seed + i, rng) for i, s in enumerate(sources)}
    names_ = sorted(families)
    out = []
    for _ in range(n):
        draw = rng.random()
        if draw < negatives + figure_rows:
            text = rng.choice(NO_PII) if draw < negatives else figures_row(rng)
            out.append(AnnotatedText(text, ()))
            continue
        template = rng.choice(families[rng.choice(names_)])
        out.append(fill(template, gens[rng.choice(sources)], SLOT_TYPES))
    return out

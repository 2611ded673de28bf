"""Held-out template families and value sources: used only to *measure* a detector's
generalisation (``bench/bench_detectors.py``, docs/results.md), never to train or tune one.

Written separately from :mod:`privlm.detect.pii_families`, in registers it does not have
(insurance claims, legal correspondence, delivery logs, local news, forum posts, property
listings, school records), and filled from value sources it does not use: Faker locales
other than the development ones (en_AU, en_CA, en_IE and en_NZ may share some of Faker's
English name lists with en_US and en_GB; their addresses and places are their own). Nothing
here comes from the presidio-research datasets or their templates.
"""

from __future__ import annotations

HELDOUT_FAMILIES: dict[str, tuple[str, ...]] = {
    "insurance": (
        "Claimant {person} states the collision happened outside {street}, {city}.",
        "Policyholder: {last}, {first}. Insured property: {address}.",
        "Adjuster {person} inspected the roof damage on {dob}; call back on {phone}.",
        "The water leak at {address} was reported by the tenant, {person}.",
        "Claim {ticket_id} denied; {title} {last} may appeal in writing to our {city} office.",
        "Third party {person} ({email}) was driving a vehicle registered in {state}.",
        "Payout of $3,150 sent to {person} at {org}.",
        "Beneficiary named in the policy: {person}, residing in {country}.",
    ),
    "legal": (
        "RE: {person} v. {org} — hearing adjourned to {dob}.",
        "Our client, {title} {last}, of {address}, instructs us as follows.",
        "Served on {person} at {street}, {city} at 9:40 am.",
        "Affidavit of {person}, sworn in {city}, {state}.",
        "Counsel for the respondent, {person}, may be reached at {email}.",
        "The estate of the late {person}, formerly of {city}, passes to {person}.",
        "Notice to quit addressed to {first} {last}, {address}.",
        "Signed at {city}, {country}, by {person} on behalf of {org}.",
    ),
    "logistics": (
        "Parcel left with neighbour at {street} — recipient {person} not home.",
        "DRIVER LOG 06:12 dep {city} depot; 09:55 arr {address}; signed {last}.",
        "Consignee: {org}, attn {person}, {address}.",
        "Return to sender: no such address {street}, {city}.",
        "Customs hold in {country}; importer of record {person}, tel {phone}.",
        "Re-route shipment {order_id} from {city} to {city}.",
        "Collected from {title} {last} at the {city} counter.",
        "Delivery instructions from {first}: leave it behind the gate at {street}.",
    ),
    "news": (
        "{person}, 42, of {city}, was named volunteer of the year on Friday.",
        "Residents of {street} in {city} complained about the noise, said {person}.",
        "The mayor of {city}, {person}, met officials from {country} last week.",
        "{org} will open a plant near {city}, {state}, chief executive {person} said.",
        "Police are asking anyone who saw {person} near {address} to call {phone}.",
        "Born in {country}, {first} {last} moved to {city} as a teenager.",
        "Tributes were paid to {person}, a teacher at the school in {city} for 30 years.",
        "{person} and {person} were married in {city} on Saturday.",
    ),
    "forum": (
        "anyone else in {city:lower}? my landlord {first:lower} {last:lower} won't fix the heating",
        "moved from {country} to {city} last year, ama",
        "{person} from {org} never answered my emails lol",
        "my old address was {street}, if the new owner sees this pls forward my mail",
        "shoutout to {first} at the {city} store, super helpful",
        "does {org} ship to {state}? asking for my mum {first:lower}",
        "lived at {address} for ten years, best neighbourhood ever",
        "dm me, real name is {person} btw",
    ),
    "property": (
        "For sale: three-bedroom house at {address}. Agent: {person}, {phone}.",
        "Viewing at {street} on Saturday; keys with {title} {last}.",
        "Vendor {person} has accepted an offer on the flat in {city}.",
        "Lease between {org} (landlord) and {person} (tenant) for {address}.",
        "Spacious apartment near the centre of {city}, {country}. Contact {email}.",
        "Tenant {first} {last} gave notice on the unit at {street}.",
        "Surveyor {person} found damp in the basement of {address}.",
        "Listing withdrawn by the owner, {person}, who is relocating to {state}.",
    ),
    "school": (
        "Pupil: {person}. Guardian: {person}. Home: {address}.",
        "{first} has been absent since Monday; mother ({phone}) says she is ill.",
        "Transfer of {person} from a school in {city}, {country}.",
        "Bus stop for {first} {last} changed to the corner of {street}.",
        "Parent-teacher meeting with {title} {last} about {first}'s reading.",
        "Emergency contacts: {person} {phone}; {person} {phone}.",
        "Award for {person} (year 9) for her essay on {country}.",
        "Trip to {city} on {dob}; consent forms to {email}.",
    ),
}

# no US Census names: privlm's recognisers use them as a gazetteer
HELDOUT_SOURCES = (
    "faker:en_AU", "faker:en_CA", "faker:en_IE", "faker:en_NZ", "faker:en_IN",
    "faker:es_ES", "faker:it_IT", "faker:nl_NL", "faker:pt_BR", "faker:sv_SE",
)  # fmt: skip

# a second held-out draw of value sources, never looked at while developing (the first was
# inspected once, for the punctuation between an address's pieces: docs/results.md)
FRESH_SOURCES = (
    "faker:fi_FI", "faker:da_DK", "faker:pl_PL", "faker:cs_CZ", "faker:en_PH", "faker:fr_CA",
    "faker:de_AT", "faker:no_NO",
)  # fmt: skip

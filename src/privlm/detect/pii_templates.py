"""Template sentences for privlm's PII evaluation corpus, in the styles of
support tickets, clinical notes, e-mail and support chat.

Two sets, written before any detector was tuned and never edited to suit one:

- ``DEV``: the set the recognisers were developed against;
- ``HELDOUT``: other wording, other contexts and other locales, written at the same time and
  used only to measure (docs/results.md reports both).

A slot is ``{type}`` or ``{type:lower}`` (chat users often write names in lower case); the
types and their gold labels are in :mod:`privlm.detect.pii_corpus`.
"""

from __future__ import annotations

DEV: dict[str, tuple[str, ...]] = {
    "ticket": (
        "Customer {person} called about order {order_id}; the package never arrived at {address}.",
        "Refund requested for account {account_id}. Card on file ends {card}, billing ZIP {zip}.",
        "Please update the phone number on member ID {member_id} to {phone}.",
        "Ticket {ticket_id}: user {username} cannot log in from IP {ip}.",
        "Caller verified identity with SSN {ssn} and date of birth {dob}.",
        "{title} {last} asked us to wire the refund to IBAN {iban}.",
        "Escalated: {person} ({email}) reports a double charge on card {card}.",
        "New shipping address for order {order_id}: {address}. Contact {phone}.",
        "Account {account_id} was locked after failed logins from {ip} and {ip}.",
        "The customer, {first}, said her ZIP code is {zip} and her DOB is {dob}.",
        "Duplicate ticket of {ticket_id}; same requester {email}.",
        "Member {member_id} ({person}) moved to {address}.",
    ),
    "clinical": (
        "Patient {person}, DOB {dob}, presented with chest pain.",
        "{title} {last} reviewed the labs; follow-up call to {phone}.",
        "Pt is a 54 y/o male, SSN {ssn}, lives at {address}.",
        "Discharge summary sent to {email}. Insurance member ID {member_id}.",
        "{person} was seen by {title} {last} for a routine check; next visit in 3 months.",
        "Emergency contact: {person}, phone {phone}.",
        "Patient reports that {first} (daughter) will pick up the prescription.",
        "Referral faxed for {person}, date of birth {dob}, address {address}.",
    ),
    "email": (
        "Hi {first},\nthanks for your order {order_id}. Reply to {email} with questions.",
        "Dear {title} {last}, your account {account_id} statement is ready.",
        "From: {person} <{email}>\nSubject: change of address\nI have moved to {address}.",
        "Please send the invoice to {email} and call me at {phone}. Regards, {person}",
        "Our records show payment from IBAN {iban} on behalf of {person}.",
        "Hello, my username is {username} and I cannot reset my password. {person}",
        "The login from {ip} on your account {account_id} was not recognised.",
        "Best,\n{person}\n{phone}\n{address}",
    ),
    "chat": (
        "USR: hi my name is {person:lower} and my order {order_id} is late",
        "USR: its {first:lower} again, account {account_id}",
        "USR: can u send it to {address} instead",
        "USR: email is {email} and phone {phone}",
        "SYS: Thanks {first}! Could you confirm your date of birth?\nUSR: {dob}",
        "USR: my username is {username}, i think someone logged in from {ip}",
        "USR: this is {person:lower}, ticket {ticket_id}",
        "USR: zip is {zip}",
        "SYS: Which card was charged?\nUSR: it was my card {card}",
        "USR: please talk to {first:lower} {last:lower} she handles billing",
    ),
}

HELDOUT: dict[str, tuple[str, ...]] = {
    "ticket": (
        "Requester {person} reports that shipment {order_id} was delivered to the wrong house; "
        "correct address is {address}.",
        "Chargeback opened on {card} by {person}; reach them on {phone}.",
        "Agent note: confirmed social ({ssn}) and birthday {dob} before reset.",
        "Subscriber {account_id} asks to close the plan. Forward confirmation to {email}.",
        "Suspicious sign-in to {username} from {ip}, blocked.",
        "Settlement transferred to {iban}, beneficiary {person}.",
        "Case {ticket_id} reopened; client {person} still has no refund.",
        "Loyalty number {member_id} merged into account {account_id}.",
    ),
    "clinical": (
        "{person} (born {dob}) was admitted overnight for observation.",
        "Consulted {title} {last}, who recommends MRI. Family reachable at {phone}.",
        "Home address on intake form: {address}. Mailing code {zip}.",
        "Identifiers checked: SSN {ssn}, plan member {member_id}.",
        "Results e-mailed to the patient at {email} per her request.",
        "{first} tolerated the procedure well and was discharged with her husband {person}.",
    ),
    "email": (
        "Good morning {title} {last},\nplease find attached the contract for {person}.",
        "Reply-To: {email}\nThe courier could not find {address}; please advise.",
        "Your one-time code was requested from {ip}. If this wasn't you, call {phone}.",
        "Thank you for your payment of $120.00 for order {order_id}.",
        "Cheers, {first}",
        "I've changed my handle to {username}, you can find me there.",
    ),
    "chat": (
        "USR: hey its {person:lower}, where is my stuff. order no {order_id}",
        "USR: ok the address is {address}",
        "USR: u can reach me on {phone} after 5",
        "USR: acct {account_id} pls",
        "USR: im {first:lower}, {last:lower} is my surname",
        "USR: born {dob} if u need it",
        "USR: i paid with {card}",
        "USR: the email should be {email} not the old one",
    ),
}

# Support-dialogue agent turns without personal data: a dialogue interleaves
# them with the customer's chat turns so that its text reads as a conversation. Written for
# the benchmark, never tuned against a detector.
AGENT_TURNS: tuple[str, ...] = (
    "SYS: Thanks for reaching out, let me look into that.",
    "SYS: I have updated the record. Is there anything else?",
    "SYS: Sorry for the trouble! I have escalated this to our team.",
    "SYS: Could you confirm a few details for me?",
    "SYS: Your request is complete and you will get a confirmation shortly.",
    "SYS: I can see the issue now. It should be fixed within 24 hours.",
)

"""A corpus of feedback with personal data in every text field, for measuring redaction (tests/test_redaction.py,
bench/ingest.py): e-mail addresses, phone numbers, credit cards, IBANs and IP addresses as people write them, in
sentences in several languages and scripts, one in each of prompt, completion, correction, comment and meta; and
rows with none, whose numbers (dates, prices, versions, sums, order numbers) must come out untouched.

Values are made from the formats' own rules (phonenumbers' example numbers, the Luhn check, ISO 13616 check digits),
never from the recognizers' patterns, so the corpus measures them rather than repeating them.
"""

from __future__ import annotations

import ipaddress
import random
import string
from dataclasses import dataclass

TYPES = ("EMAIL_ADDRESS", "PHONE_NUMBER", "CREDIT_CARD", "IBAN_CODE", "IP_ADDRESS")
FIELDS = ("prompt", "completion", "correction", "comment", "meta")

SENTENCES = (  # {} is where the value goes
    "please send it to {} thanks",
    "My details: {}.",
    "{} is the one",
    "Contact — {} — any time",
    "Mein Kontakt: {}, danke schön!",
    "Écrivez-moi à {} s'il vous plaît",
    "連絡先は {} です。",
    "Мой контакт: {}",
    "☎/✉ ({}) 🙂",
    "the answer should mention {}\nand nothing else",
    "\"{}\"",
    "{}",
    "rappel : {} ; merci",
    "ok so {}? ¿correcto?",
)
NAMES = ("ann", "bo", "chen.li", "d_ozturk", "elif", "f.muller", "jp.dupont", "kwame", "li-na", "mia+feedback",
         "nguyen.van.a", "o.brien", "priya99", "sasha", "t.nakamura", "zoe.k")
DOMAINS = ("example.com", "mail.example.org", "example.co.uk", "uni-example.de", "example.io", "corp.example.fr",
           "example.com.br", "example.net", "sub.example.ac.jp")
PHONE_REGIONS = ("US", "GB", "DE", "FR", "IL", "IN", "CA", "BR")  # national formats of these; any region with +
OTHER_REGIONS = ("IT", "JP", "AU", "ES", "NL", "MX", "ZA", "SE", "PL", "KR")
IBAN_FORMATS = {"DE": "8n10n", "GB": "4a6n8n", "FR": "5n5n11c2n", "NL": "4a10n", "ES": "4n4n1n1n10n",
                "IT": "1a5n5n12c", "CH": "5n12c", "BE": "3n7n2n", "AT": "5n11n", "PL": "8n16n"}
NEGATIVES = (
    "12+34=", "46", "1234+5678=6912", "on 2026-12-06 at 10:30", "it costs $45.99 or €1.299,00", "version v2.13.0",
    "98.6% of the time", "order #4521 shipped", "room 101, floor 3", "ISO 9001 and ISO 27001", "thanks @channel",
    "chapter 12, verse 4", "a ratio of 3:2", "the year 1999", "size 10.5 shoes", "pi is 3.14159", "reverse: owl cat",
    "Größe 42, Farbe blau", "価格は500円です", "Привет, 2 + 2 = 4", "see section 4.2.1", "call me later 🙂",
    "score 7/10", "1st, 2nd and 3rd", "the 90s were fun", "H2O and CO2", "temperature 21°C", "page 3 of 12",
)


@dataclass
class Planted:
    """One value of personal data and where it was put."""

    type: str
    value: str
    field: str


def email(rng: random.Random) -> str:
    name = rng.choice(NAMES)
    if rng.random() < 0.3:
        name = name.upper() if rng.random() < 0.3 else f"{name}{rng.randint(1, 999)}"
    address = f"{name}@{rng.choice(DOMAINS)}"
    return rng.choice((address, address, f"mailto:{address}"))


def phone(rng: random.Random) -> str:
    import phonenumbers
    from phonenumbers import PhoneNumberFormat, PhoneNumberType

    national = rng.random() < 0.6
    region = rng.choice(PHONE_REGIONS if national else OTHER_REGIONS)
    kind = rng.choice((PhoneNumberType.MOBILE, PhoneNumberType.FIXED_LINE))
    example = phonenumbers.example_number_for_type(region, kind) or phonenumbers.example_number(region)
    digits = str(example.national_number)
    for _ in range(50):  # another valid number of the same shape
        tail = "".join(rng.choice(string.digits) for _ in range(3))
        number = phonenumbers.parse(f"+{example.country_code}{digits[:-3]}{tail}")
        if phonenumbers.is_valid_number(number):
            break
    else:
        number = example
    if national:
        style = rng.choice((PhoneNumberFormat.NATIONAL, PhoneNumberFormat.INTERNATIONAL, PhoneNumberFormat.E164))
    else:
        style = rng.choice((PhoneNumberFormat.INTERNATIONAL, PhoneNumberFormat.E164))
    text = phonenumbers.format_number(number, style)
    if style == PhoneNumberFormat.INTERNATIONAL and rng.random() < 0.3:
        text = text.replace(" ", rng.choice(("-", ".")))
    return text


def credit_card(rng: random.Random) -> str:
    brand = rng.choice(("visa", "visa", "mastercard", "mastercard", "amex", "discover"))
    prefix, length = {"visa": ("4", 16), "mastercard": (str(rng.randint(51, 55)), 16),
                      "amex": (rng.choice(("34", "37")), 15), "discover": ("6011", 16)}[brand]
    body = prefix + "".join(rng.choice(string.digits) for _ in range(length - len(prefix) - 1))
    number = body + _luhn_digit(body)
    groups = (4, 6, 5) if length == 15 else (4, 4, 4, 4)
    sep = rng.choice((" ", " ", "-", ""))
    parts, at = [], 0
    for size in groups:
        parts.append(number[at:at + size])
        at += size
    return sep.join(parts)


def iban(rng: random.Random) -> str:
    country = rng.choice(sorted(IBAN_FORMATS))
    bban = ""
    for size, kind in _format_parts(IBAN_FORMATS[country]):
        alphabet = {"n": string.digits, "a": string.ascii_uppercase, "c": string.ascii_uppercase + string.digits}[kind]
        bban += "".join(rng.choice(alphabet) for _ in range(size))
    check = 98 - int(_iban_digits(bban + country + "00")) % 97
    compact = f"{country}{check:02d}{bban}"
    if rng.random() < 0.5:
        return compact
    return " ".join(compact[i:i + 4] for i in range(0, len(compact), 4))


def ip_address(rng: random.Random) -> str:
    if rng.random() < 0.6:
        return str(ipaddress.IPv4Address(rng.randint(0x01000000, 0xDFFFFFFF)))
    address = ipaddress.IPv6Address(rng.getrandbits(128))
    if rng.random() < 0.5:  # a zero run, written with ::
        words = address.exploded.split(":")
        start = rng.randint(1, 5)
        words[start:start + 2] = ["0000", "0000"]
        address = ipaddress.IPv6Address(":".join(words))
    return str(address) if rng.random() < 0.7 else address.exploded


MAKERS = {"EMAIL_ADDRESS": email, "PHONE_NUMBER": phone, "CREDIT_CARD": credit_card, "IBAN_CODE": iban,
          "IP_ADDRESS": ip_address}


def rows(n_with: int, n_without: int, seed: int = 0) -> tuple[list[dict], list[list[Planted]]]:
    """Schema v1 events: `n_with` with a value in each of the five text fields (types in turn, so each type meets
    each field), then `n_without` with none; and, per event, what was planted in it."""
    rng = random.Random(seed)
    events, planted = [], []
    for i in range(n_with + n_without):
        texts, values = {}, []
        for j, name in enumerate(FIELDS):
            if i < n_with:
                kind = TYPES[(i + j) % len(TYPES)]
                value = MAKERS[kind](rng)
                values.append(Planted(kind, value, name))
                texts[name] = rng.choice(SENTENCES).format(value)
            else:
                texts[name] = rng.choice(NEGATIVES)
        events.append({
            "schema_version": 1, "event_id": f"pii-{seed}-{i}", "ts": "2026-12-01T12:00:00Z", "user_id": f"u{i % 7}",
            "model_version": "1", "prompt": texts["prompt"], "completion": texts["completion"],
            "rating": rng.choice(("up", "down")), "correction": texts["correction"], "comment": texts["comment"],
            "source": "user", "skill": None,
            "meta": {"client": "web", "profile": {"note": texts["meta"]}, "tags": ["x", texts["meta"][:3]]}})
        planted.append(values)
    return events, planted


def _luhn_digit(body: str) -> str:
    total = 0
    for i, ch in enumerate(reversed(body)):
        d = int(ch) * (2 if i % 2 == 0 else 1)
        total += d - 9 if d > 9 else d
    return str((10 - total % 10) % 10)


def _format_parts(spec: str):
    number = ""
    for ch in spec:
        if ch.isdigit():
            number += ch
        else:
            yield int(number), ch
            number = ""


def _iban_digits(text: str) -> str:
    return "".join(str(int(ch, 36)) for ch in text)

"""The shop's catalogue, the truth only the world holds: products and their prices, plans, shipping and returns.

`make_catalogue(seed)` draws one; `drift(catalogue, rng)` changes a third of the prices, as a shop does, and says
which. Small on purpose: 48 facts (12 prices, 4 plans x 3, 4 regions x 2 speeds x 2, 4 categories x 2), few
enough that a tiny model can hold them all.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace

PRODUCT_NAMES = {  # category -> the products a shop of it may sell
    "electronics": ("Delta Headphones", "Iris Speaker", "Lumen Monitor", "Nova Charger"),
    "kitchen": ("Basil Kettle", "Ember Toaster", "Juniper Blender", "Pebble Mug"),
    "furniture": ("Aurora Lamp", "Cedar Desk", "Granite Chair", "Maple Shelf"),
    "apparel": ("Fjord Jacket", "Harbor Backpack", "Kestrel Boots", "Orchid Scarf"),
}
CATEGORIES = tuple(PRODUCT_NAMES)
PRICES = (19, 24, 29, 34, 39, 45, 49, 59, 69, 79, 89, 99, 119, 129, 149, 179, 199, 229, 249, 299, 349, 399)
PLAN_NAMES = ("Starter", "Team", "Business", "Enterprise")
REGIONS = ("the US", "Canada", "Europe", "Asia")
SPEEDS = ("standard", "express")
RETURN_WINDOWS = (14, 30, 60, 90)
REFUND_KINDS = ("full refund", "store credit", "exchange only")
PRODUCTS_PER_CATEGORY = 3


@dataclass(frozen=True)
class Product:
    name: str
    category: str
    price: int  # dollars


@dataclass(frozen=True)
class Plan:
    name: str
    monthly: int  # dollars a month
    seats: int
    storage_gb: int


@dataclass(frozen=True)
class Shipping:
    region: str
    speed: str
    days: int  # business days
    cost: int  # dollars; 0 is free


@dataclass(frozen=True)
class ReturnPolicy:
    category: str
    window_days: int
    refund: str  # one of REFUND_KINDS


@dataclass(frozen=True)
class Catalogue:
    products: tuple[Product, ...]
    plans: tuple[Plan, ...]
    shipping: tuple[Shipping, ...]
    returns: tuple[ReturnPolicy, ...]

    def product(self, name: str) -> Product:
        return next(p for p in self.products if p.name == name)

    def plan(self, name: str) -> Plan:
        return next(p for p in self.plans if p.name == name)

    def route(self, region: str, speed: str) -> Shipping:
        return next(s for s in self.shipping if s.region == region and s.speed == speed)

    def policy(self, category: str) -> ReturnPolicy:
        return next(r for r in self.returns if r.category == category)


@dataclass(frozen=True)
class Drift:
    """What changed under the model: the new catalogue, the topic, and each changed product's (old, new) price."""

    catalogue: Catalogue
    topic: str
    changed: dict[str, tuple[int, int]]


def make_catalogue(seed: int = 0) -> Catalogue:
    """One shop's catalogue; the same seed gives the same catalogue, so a run's truth can be rebuilt from its seed."""
    rng = random.Random(f"catalogue-{seed}")
    kinds = [(name, category) for category in CATEGORIES
             for name in rng.sample(PRODUCT_NAMES[category], PRODUCTS_PER_CATEGORY)]
    prices = rng.sample(PRICES, len(kinds))  # distinct, so a price names its product
    products = tuple(Product(name, category, price) for (name, category), price in zip(kinds, prices, strict=True))
    plans = tuple(Plan(name, monthly, seats, storage) for name, monthly, seats, storage in zip(
        PLAN_NAMES, sorted(rng.sample(range(9, 400, 10), len(PLAN_NAMES))),
        sorted(rng.sample((1, 3, 5, 10, 25, 50, 100, 250), len(PLAN_NAMES))),
        sorted(rng.sample((10, 50, 100, 200, 500, 1000, 2000), len(PLAN_NAMES))), strict=True))
    shipping = []  # distinct days and costs where there are enough, so a guess from another route is wrong
    for region, days, cost, fast_cost in zip(REGIONS, rng.sample(range(4, 11), 4), rng.sample((0, 5, 7, 9, 12), 4),
                                             rng.sample((15, 19, 25, 35), 4), strict=True):
        shipping += [Shipping(region, "standard", days, cost),
                     Shipping(region, "express", rng.randint(1, 3), fast_cost)]
    returns = tuple(ReturnPolicy(category, window, rng.choice(REFUND_KINDS))
                    for category, window in zip(CATEGORIES, rng.sample(RETURN_WINDOWS, 4), strict=True))
    return Catalogue(products, plans, tuple(shipping), returns)


def drift(catalogue: Catalogue, rng: random.Random, share: float = 1 / 3) -> Drift:
    """A third of the products get a new price 30% or more away from the old, within half to double it (else the
    nearest such), one no other product has: a change a model that learned the old prices gets clearly wrong."""
    moved = rng.sample(catalogue.products, max(1, round(len(catalogue.products) * share)))
    taken = {p.price for p in catalogue.products}
    changed: dict[str, tuple[int, int]] = {}
    for product in moved:
        away = [p for p in PRICES if p not in taken and abs(p - product.price) >= 0.3 * product.price]
        band = [p for p in away if product.price / 2 <= p <= 2 * product.price]
        new = rng.choice(band) if band else min(away, key=lambda p: abs(math.log(p / product.price)))
        taken.add(new)
        changed[product.name] = (product.price, new)
    products = tuple(replace(p, price=changed[p.name][1]) if p.name in changed else p for p in catalogue.products)
    return Drift(replace(catalogue, products=products), "prices", changed)

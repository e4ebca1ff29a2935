"""Units as people read them."""


def human_bytes(n: float) -> str:
    """Decimal units (1 KB = 1000 B), as disk sizes are sold and `df -H` prints them."""
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1000 or unit == "PB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.2f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")

"""A small hotel-bookings application on SQLite: the local Fleet-style environment.

It has what a Fleet environment has: a *seed* database (the state every
rollout starts from) and a *current* database (the state the agent's tool
calls change), and tools that read and change it. Verifiers compare the two.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from typing import Any

__all__ = ["BookingsApp", "copy_database", "create_seed_db", "prepare_databases"]

_SCHEMA = """
CREATE TABLE guests (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    email TEXT NOT NULL UNIQUE,
    vip INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE rooms (
    id INTEGER PRIMARY KEY,
    number TEXT NOT NULL UNIQUE,
    room_type TEXT NOT NULL,
    nightly_rate INTEGER NOT NULL,
    status TEXT NOT NULL DEFAULT 'available'
);
CREATE TABLE bookings (
    id INTEGER PRIMARY KEY,
    guest_id INTEGER NOT NULL REFERENCES guests(id),
    room_id INTEGER NOT NULL REFERENCES rooms(id),
    check_in TEXT NOT NULL,
    check_out TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'confirmed',
    notes TEXT NOT NULL DEFAULT ''
);
"""

_GUESTS = [
    (1, "Ada Lovelace", "ada@example.com", 1),
    (2, "Alan Turing", "alan@example.com", 0),
    (3, "Grace Hopper", "grace@example.com", 1),
    (4, "Edsger Dijkstra", "edsger@example.com", 0),
]
_ROOMS = [
    (1, "101", "single", 90, "available"),
    (2, "102", "single", 90, "available"),
    (3, "201", "double", 140, "available"),
    (4, "202", "double", 140, "maintenance"),
    (5, "301", "suite", 320, "available"),
]
_BOOKINGS = [
    (1, 1, 3, "2026-03-01", "2026-03-04", "confirmed", ""),
    (2, 2, 1, "2026-03-02", "2026-03-03", "confirmed", ""),
    (3, 3, 5, "2026-03-10", "2026-03-12", "confirmed", "late arrival"),
    (4, 4, 2, "2026-02-20", "2026-02-22", "cancelled", ""),
]


def create_seed_db(path: str | Path) -> Path:
    """Write the seed database (deterministic content) to ``path``."""
    path = Path(path)
    if path.exists():
        path.unlink()
    con = sqlite3.connect(path)
    try:
        con.executescript(_SCHEMA)
        con.executemany("INSERT INTO guests VALUES (?,?,?,?)", _GUESTS)
        con.executemany("INSERT INTO rooms VALUES (?,?,?,?,?)", _ROOMS)
        con.executemany("INSERT INTO bookings VALUES (?,?,?,?,?,?,?)", _BOOKINGS)
        con.commit()
    finally:
        con.close()
    return path


def prepare_databases(directory: str | Path) -> tuple[Path, Path]:
    """A fresh ``seed.sqlite`` and its copy ``current.sqlite`` in ``directory``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    seed = create_seed_db(directory / "seed.sqlite")
    current = directory / "current.sqlite"
    shutil.copyfile(seed, current)
    return seed, current


def copy_database(src: str | Path, dst: str | Path) -> Path:
    """Copy the SQLite database ``src`` to ``dst`` consistently, with SQLite's backup API.

    The copy is one consistent state of ``src`` even while another process
    writes it (the backup restarts when the source changes under it), as a
    file copy is not; ``src`` is opened read-only and never changed.
    """
    dst = Path(dst)
    source = sqlite3.connect(f"{Path(src).absolute().as_uri()}?mode=ro", uri=True)
    try:
        target = sqlite3.connect(dst)
        try:
            source.backup(target)
        finally:
            target.close()
    finally:
        source.close()
    return dst


class ToolError(Exception):
    """A tool was called with arguments the application refuses."""


def _rows(cur: sqlite3.Cursor) -> list[dict[str, Any]]:
    cols = [d[0] for d in cur.description or ()]
    return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]


def _check_dates(check_in: str, check_out: str) -> None:
    import datetime as dt

    try:
        a = dt.date.fromisoformat(check_in)
        b = dt.date.fromisoformat(check_out)
    except ValueError:
        raise ToolError("dates must be YYYY-MM-DD") from None
    if b <= a:
        raise ToolError("check_out must be after check_in")


class BookingsApp:
    """The application logic: every public method is one MCP tool."""

    def __init__(self, db_path: str | Path) -> None:
        self.db_path = str(db_path)

    def _con(self) -> sqlite3.Connection:
        con = sqlite3.connect(self.db_path, timeout=10)
        con.execute("PRAGMA foreign_keys = ON")
        return con

    def list_rooms(self, room_type: str | None = None) -> list[dict[str, Any]]:
        """List rooms, optionally of one type (single, double, suite)."""
        with self._con() as con:
            if room_type:
                return _rows(con.execute("SELECT * FROM rooms WHERE room_type = ?", (room_type,)))
            return _rows(con.execute("SELECT * FROM rooms ORDER BY id"))

    def search_available_rooms(
        self, check_in: str, check_out: str, room_type: str | None = None
    ) -> list[dict[str, Any]]:
        """Rooms that are in service and free for the whole stay [check_in, check_out)."""
        _check_dates(check_in, check_out)
        sql = (
            "SELECT * FROM rooms r WHERE r.status = 'available' AND NOT EXISTS ("
            " SELECT 1 FROM bookings b WHERE b.room_id = r.id AND b.status = 'confirmed'"
            " AND b.check_in < ? AND b.check_out > ?)"
        )
        args: list[Any] = [check_out, check_in]
        if room_type:
            sql += " AND r.room_type = ?"
            args.append(room_type)
        with self._con() as con:
            return _rows(con.execute(sql + " ORDER BY r.id", args))

    def find_guest(self, query: str) -> list[dict[str, Any]]:
        """Guests whose name or email contains ``query`` (case-insensitive)."""
        like = f"%{query.lower()}%"
        with self._con() as con:
            return _rows(
                con.execute(
                    "SELECT * FROM guests WHERE lower(name) LIKE ? OR lower(email) LIKE ?",
                    (like, like),
                )
            )

    def create_guest(self, name: str, email: str) -> dict[str, Any]:
        """Register a new guest."""
        if not name.strip() or "@" not in email:
            raise ToolError("a guest needs a name and a valid email")
        with self._con() as con:
            try:
                cur = con.execute("INSERT INTO guests (name, email) VALUES (?, ?)", (name, email))
            except sqlite3.IntegrityError:
                raise ToolError(f"a guest with email {email} already exists") from None
            return {"id": cur.lastrowid, "name": name, "email": email, "vip": 0}

    def list_bookings(self, guest_id: int | None = None) -> list[dict[str, Any]]:
        """Bookings, optionally of one guest."""
        with self._con() as con:
            if guest_id is not None:
                return _rows(
                    con.execute(
                        "SELECT * FROM bookings WHERE guest_id = ? ORDER BY id", (guest_id,)
                    )
                )
            return _rows(con.execute("SELECT * FROM bookings ORDER BY id"))

    def create_booking(
        self, guest_id: int, room_id: int, check_in: str, check_out: str, notes: str = ""
    ) -> dict[str, Any]:
        """Book a room for a guest; the room must be available for the stay."""
        _check_dates(check_in, check_out)
        with self._con() as con:
            if not con.execute("SELECT 1 FROM guests WHERE id = ?", (guest_id,)).fetchone():
                raise ToolError(f"no guest with id {guest_id}")
            room = con.execute("SELECT status FROM rooms WHERE id = ?", (room_id,)).fetchone()
            if room is None:
                raise ToolError(f"no room with id {room_id}")
            if room[0] != "available":
                raise ToolError(f"room {room_id} is out of service ({room[0]})")
            clash = con.execute(
                "SELECT id FROM bookings WHERE room_id = ? AND status = 'confirmed' "
                "AND check_in < ? AND check_out > ?",
                (room_id, check_out, check_in),
            ).fetchone()
            if clash:
                raise ToolError(f"room {room_id} is already booked (booking {clash[0]})")
            cur = con.execute(
                "INSERT INTO bookings (guest_id, room_id, check_in, check_out, notes) "
                "VALUES (?,?,?,?,?)",
                (guest_id, room_id, check_in, check_out, notes),
            )
            return {
                "id": cur.lastrowid,
                "guest_id": guest_id,
                "room_id": room_id,
                "check_in": check_in,
                "check_out": check_out,
                "status": "confirmed",
                "notes": notes,
            }

    def cancel_booking(self, booking_id: int) -> dict[str, Any]:
        """Cancel a confirmed booking."""
        with self._con() as con:
            row = con.execute("SELECT status FROM bookings WHERE id = ?", (booking_id,)).fetchone()
            if row is None:
                raise ToolError(f"no booking with id {booking_id}")
            if row[0] == "cancelled":
                raise ToolError(f"booking {booking_id} is already cancelled")
            con.execute("UPDATE bookings SET status = 'cancelled' WHERE id = ?", (booking_id,))
            return {"id": booking_id, "status": "cancelled"}

    def change_booking_dates(
        self, booking_id: int, check_in: str, check_out: str
    ) -> dict[str, Any]:
        """Move a confirmed booking to new dates, if its room is free then."""
        _check_dates(check_in, check_out)
        with self._con() as con:
            row = con.execute(
                "SELECT room_id, status FROM bookings WHERE id = ?", (booking_id,)
            ).fetchone()
            if row is None:
                raise ToolError(f"no booking with id {booking_id}")
            if row[1] != "confirmed":
                raise ToolError(f"booking {booking_id} is {row[1]}")
            clash = con.execute(
                "SELECT id FROM bookings WHERE room_id = ? AND status = 'confirmed' AND id != ? "
                "AND check_in < ? AND check_out > ?",
                (row[0], booking_id, check_out, check_in),
            ).fetchone()
            if clash:
                raise ToolError(f"room {row[0]} is booked then (booking {clash[0]})")
            con.execute(
                "UPDATE bookings SET check_in = ?, check_out = ? WHERE id = ?",
                (check_in, check_out, booking_id),
            )
            return {"id": booking_id, "check_in": check_in, "check_out": check_out}

    def add_booking_note(self, booking_id: int, note: str) -> dict[str, Any]:
        """Append a note to a booking."""
        with self._con() as con:
            row = con.execute("SELECT notes FROM bookings WHERE id = ?", (booking_id,)).fetchone()
            if row is None:
                raise ToolError(f"no booking with id {booking_id}")
            notes = f"{row[0]}; {note}" if row[0] else note
            con.execute("UPDATE bookings SET notes = ? WHERE id = ?", (notes, booking_id))
            return {"id": booking_id, "notes": notes}

    def set_room_status(self, room_id: int, status: str) -> dict[str, Any]:
        """Put a room in or out of service (available, maintenance)."""
        if status not in ("available", "maintenance"):
            raise ToolError("status must be 'available' or 'maintenance'")
        with self._con() as con:
            cur = con.execute("UPDATE rooms SET status = ? WHERE id = ?", (status, room_id))
            if cur.rowcount == 0:
                raise ToolError(f"no room with id {room_id}")
            return {"id": room_id, "status": status}

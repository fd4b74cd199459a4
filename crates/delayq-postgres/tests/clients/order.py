"""The order example of docs/postgres.md with psycopg 3: in one transaction an order row goes
into the application's own table and delayq.add schedules its cancellation; a second order's
transaction rolls back, and its task never exists.

Usage: order.py URL DELAY_MS. Prints one JSON line: the committed task's id and due_ms, the
rolled-back task's id."""

import json
import sys

import psycopg

url, delay_ms = sys.argv[1], int(sys.argv[2])

with psycopg.connect(url) as conn:
    conn.execute(
        "CREATE TABLE IF NOT EXISTS orders (id bigint PRIMARY KEY, status text NOT NULL)"
    )
    conn.commit()

    # The order and its delayed cancellation commit together, or not at all.
    with conn.transaction():
        conn.execute("INSERT INTO orders (id, status) VALUES (%s, 'unpaid')", (1,))
        outcome, due_ms = conn.execute(
            "SELECT * FROM delayq.add('orders', %s, %s, delay_ms => %s)",
            ("cancel-1", json.dumps({"order": 1}), delay_ms),
        ).fetchone()
        assert outcome == "added", outcome

    # An order whose transaction fails: its task is gone with it.
    try:
        with conn.transaction():
            conn.execute("INSERT INTO orders (id, status) VALUES (%s, 'unpaid')", (2,))
            conn.execute(
                "SELECT delayq.add('orders', %s, %s, delay_ms => %s)",
                ("cancel-2", json.dumps({"order": 2}), delay_ms),
            )
            raise RuntimeError("the payment provider said no")
    except RuntimeError:
        pass

    # Bad input raises with the field named in the message and in the error's column.
    try:
        conn.execute("SELECT delayq.add('orders', 'x', '{}', delay_ms => -5)")
        raise SystemExit("a negative delay was accepted")
    except psycopg.errors.InvalidParameterValue as e:
        bad = {"sqlstate": e.sqlstate, "column": e.diag.column_name, "message": str(e)}
    conn.rollback()

print(json.dumps({"committed": "cancel-1", "due_ms": due_ms, "rolled_back": "cancel-2",
                  "bad": bad}))

// The order example of docs/postgres.md with node-postgres (`pg`): in one transaction an
// order row goes into the application's own table and delayq.add schedules its
// cancellation; a second order's transaction rolls back, and its task never exists.
//
// Usage: node order.js URL DELAY_MS (with `pg` on NODE_PATH). Prints one JSON line: the
// committed task's id and due_ms, the rolled-back task's id.
'use strict';
const { Client } = require('pg');

async function main() {
    const [url, delay] = process.argv.slice(2);
    const client = new Client({ connectionString: url });
    await client.connect();
    await client.query(
        'CREATE TABLE IF NOT EXISTS orders (id bigint PRIMARY KEY, status text NOT NULL)');

    // The order and its delayed cancellation commit together, or not at all.
    await client.query('BEGIN');
    await client.query("INSERT INTO orders (id, status) VALUES ($1, 'unpaid')", [1]);
    const added = await client.query(
        "SELECT * FROM delayq.add('orders', $1, $2, delay_ms => $3)",
        ['cancel-1', JSON.stringify({ order: 1 }), Number(delay)]);
    await client.query('COMMIT');
    const { outcome, due_ms } = added.rows[0];
    if (outcome !== 'added') throw new Error(`outcome ${outcome}`);

    // An order whose transaction fails: its task is gone with it.
    await client.query('BEGIN');
    await client.query("INSERT INTO orders (id, status) VALUES ($1, 'unpaid')", [2]);
    await client.query("SELECT delayq.add('orders', $1, $2, delay_ms => $3)",
        ['cancel-2', JSON.stringify({ order: 2 }), Number(delay)]);
    await client.query('ROLLBACK');

    // Bad input raises with the field named in the message and in the error's column.
    let bad = null;
    try {
        await client.query("SELECT delayq.add('orders', 'x', '{}', delay_ms => -5)");
    } catch (e) {
        bad = { sqlstate: e.code, column: e.column, message: e.message };
    }
    if (bad === null) throw new Error('a negative delay was accepted');
    await client.end();
    // due_ms is a bigint: node-postgres hands it over as a string.
    console.log(JSON.stringify({
        committed: 'cancel-1', due_ms: Number(due_ms), rolled_back: 'cancel-2', bad,
    }));
}

main().catch((e) => {
    console.error(e);
    process.exit(1);
});

//! Keyspaces: named key spaces in one database, written together in one
//! transaction.
//!
//! ```text
//! cargo run --example keyspaces
//! ```
//!
//! An order and the stock it takes live in two keyspaces; the same key
//! (`teapot`) means one thing in each. One transaction updates both or
//! neither, and a scan of a keyspace reads its keys only.

use percolate::Client;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let client = Client::open(dir.path())?;
    let stock = client.keyspace("stock")?;
    let orders = client.keyspace("orders")?;

    client.with_retry(|txn| {
        stock.put(txn, b"teapot", b"3")?;
        stock.put(txn, b"cup", b"12")?;
        Ok(())
    })?;
    for (order, item) in [(&b"order-1"[..], &b"teapot"[..]), (b"order-2", b"cup")] {
        client.with_retry(|txn| {
            let left: u32 = match stock.get(txn, item)? {
                Some(v) => String::from_utf8_lossy(&v).parse().unwrap_or(0),
                None => 0,
            };
            stock.put(txn, item, (left - 1).to_string())?;
            orders.put(txn, order, item.to_vec())?;
            // The same key in another keyspace: an order for the item.
            orders.put(txn, item, order.to_vec())
        })?;
    }

    client.view(|txn| {
        for (name, space) in [("stock", &stock), ("orders", &orders)] {
            for pair in space.iter(txn) {
                let (key, value) = pair?;
                println!(
                    "{name:>6}: {} = {}",
                    String::from_utf8_lossy(&key),
                    String::from_utf8_lossy(&value)
                );
            }
        }
        Ok(())
    })?;
    let left = client.view(|txn| stock.get(txn, b"teapot"))?;
    assert_eq!(left, Some(b"2".to_vec()));
    Ok(())
}

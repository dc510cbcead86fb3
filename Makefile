# The two commands of the README. Both install what the build needs first.

.PHONY: setup demo test

setup:
	@scripts/setup.sh

# The main job: write, commit and read through the MVCC layer on RocksDB.
demo: setup
	cargo run --example quickstart

# Every test of every crate, on both engines, plus doc tests.
test: setup
	cargo test --workspace

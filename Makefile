# The two commands of the README. Both install what the build needs first.

.PHONY: setup demo test

setup:
	@scripts/setup.sh

# The main job: the bank. Concurrent transfers between accounts in four
# regions (1PC and async commit), audited at snapshots; exits 1 if money is
# ever created or lost. Release, so that the throughput means something (its
# first build compiles RocksDB once more, optimized).
demo: setup
	cargo run --release --example bank -- --seconds 10

# Every test of every crate, on both engines, plus doc tests.
test: setup
	cargo test --workspace

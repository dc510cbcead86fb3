// A memtable insert hint per user key for the write CF.
//
// RocksDB can start a skip-list insert from where the previous insert of
// the same "hint prefix" ended (`memtable_insert_with_hint_prefix_extractor`)
// instead of searching from the top of the list, but it takes that option
// only by name, through its object registry, and its built-in transforms
// (fixed and capped prefixes) cannot strip a ts suffix from keys of varying
// length. This file registers one that can, under the name
// `percolate.StripTs`: the stored key without its 8-byte ts, so that a
// key's hint is where its newest version went in. RocksDB keeps the hint
// just past the node it inserted, and a key's next version sorts just
// before that node (versions sort newest first): the insert keeps the
// hint's upper levels and walks the bottom level a few nodes, instead of
// some twenty levels from the top. Only a key written before gets a hint
// (see `StripTs`).
//
// Only RocksDB's public headers are used, and nothing crosses the C API by
// layout: Rust calls `percolate_register_insert_hint` once and then names
// the transform in an options string.

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "rocksdb/slice.h"
#include "rocksdb/slice_transform.h"
#include "rocksdb/utilities/object_registry.h"

namespace {

using ROCKSDB_NAMESPACE::ObjectLibrary;
using ROCKSDB_NAMESPACE::Slice;
using ROCKSDB_NAMESPACE::SliceTransform;

// The length of the inverted commit ts at the end of a write-CF key.
constexpr size_t kTsLen = 8;

// A key's hint costs the memtable about 280 bytes (RocksDB's insert
// position, sized for the skip list's full height, and its map entry), so
// only keys written before get one: a key written once in a memtable's
// life saves nothing from a hint. `seen_` remembers a tag of the last key
// that hashed to each of its slots; a key finds its own tag there from its
// second write on (until a key that shares the slot pushes it out).
class StripTs : public SliceTransform {
 public:
  static const char* kClassName() { return "percolate.StripTs"; }
  const char* Name() const override { return kClassName(); }

  Slice Transform(const Slice& key) const override {
    return Slice(key.data(), key.size() - kTsLen);
  }

  // Whether the key gets a hint: it has a ts (every stored write-CF key
  // does) and it was written before. RocksDB asks only when it inserts
  // into a memtable, one insert at a time per memtable; several memtables
  // of one column family may ask at once, hence the atomics.
  bool InDomain(const Slice& key) const override {
    if (key.size() <= kTsLen) {
      return false;
    }
    uint64_t hash = Hash(Transform(key));
    // The tag is never 0, the value of an unused slot. A byte keeps the
    // table at 16 KiB, mostly in the core's caches (with 4-byte tags the
    // check was a cache miss); another key's equal tag, 1 in 255, only
    // gives that key a hint it may not use.
    uint8_t tag = static_cast<uint8_t>(hash >> 56);
    tag += tag == 0;
    std::atomic<uint8_t>& slot = seen_[hash & (kSlots - 1)];
    if (slot.load(std::memory_order_relaxed) == tag) {
      return true;
    }
    slot.store(tag, std::memory_order_relaxed);
    return false;
  }

 private:
  static constexpr size_t kSlots = 1 << 14;

  // Eight bytes at a time, each word mixed in by a multiply.
  static uint64_t Hash(const Slice& bytes) {
    constexpr uint64_t kMul = 0x9E3779B97F4A7C15ULL;
    uint64_t hash = bytes.size() * kMul;
    const char* p = bytes.data();
    size_t left = bytes.size();
    while (left > 0) {
      uint64_t word = 0;
      size_t n = left < 8 ? left : 8;
      std::memcpy(&word, p, n);
      hash = (hash ^ word) * kMul;
      hash ^= hash >> 29;
      p += n;
      left -= n;
    }
    return hash * kMul;
  }

  mutable std::array<std::atomic<uint8_t>, kSlots> seen_{};
};

}  // namespace

extern "C" void percolate_register_insert_hint() {
  static std::once_flag once;
  std::call_once(once, [] {
    ObjectLibrary::Default()->AddFactory<const SliceTransform>(
        StripTs::kClassName(),
        [](const std::string& /*uri*/,
           std::unique_ptr<const SliceTransform>* guard,
           std::string* /*errmsg*/) {
          guard->reset(new StripTs());
          return guard->get();
        });
  });
}

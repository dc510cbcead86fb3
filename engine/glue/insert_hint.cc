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
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <utility>

#include "rocksdb/memtablerep.h"
#include "rocksdb/slice.h"
#include "rocksdb/slice_transform.h"
#include "rocksdb/utilities/object_registry.h"

namespace {

using ROCKSDB_NAMESPACE::Allocator;
using ROCKSDB_NAMESPACE::Arena;
using ROCKSDB_NAMESPACE::KeyHandle;
using ROCKSDB_NAMESPACE::Logger;
using ROCKSDB_NAMESPACE::LookupKey;
using ROCKSDB_NAMESPACE::MemTableRep;
using ROCKSDB_NAMESPACE::MemTableRepFactory;
using ROCKSDB_NAMESPACE::ObjectLibrary;
using ROCKSDB_NAMESPACE::SkipListFactory;
using ROCKSDB_NAMESPACE::Slice;
using ROCKSDB_NAMESPACE::SliceTransform;
using ROCKSDB_NAMESPACE::Status;

// The length of the inverted commit ts at the end of a write-CF key.
constexpr size_t kTsLen = 8;

// A key's hint costs the memtable about 280 bytes (RocksDB's insert
// position, sized for the skip list's full height, and its map entry), so
// only keys written before get one: a key written once in a memtable's
// life saves nothing from a hint. `seen_` remembers a tag of the last key
// that hashed to each of its slots; a key finds its own tag there from its
// second write on (until a key that shares the slot pushes it out).
// Eight bytes at a time, each word mixed in by a multiply.
uint64_t HashBytes(const Slice& bytes) {
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
    uint64_t hash = HashBytes(Transform(key));
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

  mutable std::array<std::atomic<uint8_t>, kSlots> seen_{};
};

// Insert hints for concurrent memtable inserts.
//
// RocksDB keeps the per-prefix insert hints above only for inserts made
// one at a time. With concurrent inserts (unordered writes) every insert
// searches the skip list from the top, unless the memtable is handed a
// hint for it. `HintedRep` wraps RocksDB's skip-list memtable and hands
// each concurrent insert the hint of its slot in a fixed table, slots
// chosen by the key's hint prefix: the stored key without its ts for the
// write CF (a hint per user key, as `StripTs`), the empty prefix for the
// lock CF (one hint for all keys, as `rocksdb.FixedPrefix.1` on data
// keys). A hint is RocksDB's own insert position (a "splice"), which it
// validates against the key before use and repairs where other inserts
// moved past it, so any hint is safe, only more or less useful; it must
// only not be used by two inserts at once, so an insert takes its slot
// with a try-lock and goes without a hint when another insert holds it.
// A slot that another prefix takes over gets a fresh hint. Everything
// else goes to the wrapped skip list unchanged, including the inserts
// RocksDB makes one at a time (they use the memtable's own hints).
class HintedRep : public MemTableRep {
 public:
  HintedRep(MemTableRep* inner, Allocator* allocator, size_t strip)
      : MemTableRep(allocator),
        inner_(inner),
        strip_(strip),
        mask_(strip == kAll ? 0 : kSlots - 1),
        slots_(new Slot[mask_ + 1]) {}

  ~HintedRep() override {
    for (size_t i = 0; i <= mask_; ++i) {
      // Allocated by the skip list with `new char[]`.
      delete[] static_cast<char*>(slots_[i].splice);
    }
  }

  KeyHandle Allocate(const size_t len, char** buf) override {
    return inner_->Allocate(len, buf);
  }
  void Insert(KeyHandle handle) override { inner_->Insert(handle); }
  bool InsertKey(KeyHandle handle) override {
    return inner_->InsertKey(handle);
  }
  void InsertWithHint(KeyHandle handle, void** hint) override {
    inner_->InsertWithHint(handle, hint);
  }
  bool InsertKeyWithHint(KeyHandle handle, void** hint) override {
    return inner_->InsertKeyWithHint(handle, hint);
  }
  void InsertWithHintConcurrently(KeyHandle handle, void** hint) override {
    inner_->InsertWithHintConcurrently(handle, hint);
  }
  bool InsertKeyWithHintConcurrently(KeyHandle handle, void** hint) override {
    return inner_->InsertKeyWithHintConcurrently(handle, hint);
  }
  void InsertConcurrently(KeyHandle handle) override {
    InsertKeyConcurrently(handle);
  }

  bool InsertKeyConcurrently(KeyHandle handle) override {
    Slice prefix;
    if (!HintPrefix(static_cast<const char*>(handle), &prefix)) {
      return inner_->InsertKeyConcurrently(handle);
    }
    uint64_t hash = HashBytes(prefix);
    Slot& slot = slots_[hash & mask_];
    bool idle = false;
    if (!slot.busy.compare_exchange_strong(idle, true,
                                           std::memory_order_acquire)) {
      return inner_->InsertKeyConcurrently(handle);
    }
    if (slot.hash != hash) {
      // Another prefix's position. Only a prefix inserted before takes
      // the slot over (and starts its hint afresh): one inserted once in
      // a memtable's life would gain nothing from a hint and only push
      // out one that serves. The slot remembers a one-byte tag of the
      // last prefix that found it taken (as `StripTs::InDomain`).
      uint8_t tag = static_cast<uint8_t>(hash >> 56);
      tag += tag == 0;
      if (slot.seen != tag) {
        slot.seen = tag;
        slot.busy.store(false, std::memory_order_release);
        return inner_->InsertKeyConcurrently(handle);
      }
      delete[] static_cast<char*>(slot.splice);
      slot.splice = nullptr;
      slot.hash = hash;
    }
    bool inserted = inner_->InsertKeyWithHintConcurrently(handle, &slot.splice);
    slot.busy.store(false, std::memory_order_release);
    return inserted;
  }

  void BatchPostProcess() override { inner_->BatchPostProcess(); }
  bool Contains(const char* key) const override {
    return inner_->Contains(key);
  }
  void MarkReadOnly() override { inner_->MarkReadOnly(); }
  void MarkFlushed() override { inner_->MarkFlushed(); }
  void Get(const LookupKey& k, void* callback_args,
           bool (*callback_func)(void* arg, const char* entry)) override {
    inner_->Get(k, callback_args, callback_func);
  }
  Status GetAndValidate(
      const LookupKey& k, void* callback_args,
      bool (*callback_func)(void* arg, const char* entry),
      bool allow_data_in_error, bool detect_key_out_of_order,
      const std::function<Status(const char*, bool)>& key_validation_callback)
      override {
    return inner_->GetAndValidate(k, callback_args, callback_func,
                                  allow_data_in_error, detect_key_out_of_order,
                                  key_validation_callback);
  }
  Status MultiGet(size_t num_keys, const char* const* keys,
                  void** callback_args,
                  bool (*callback_func)(void* arg, const char* entry),
                  bool allow_data_in_errors, bool detect_key_out_of_order,
                  const std::function<Status(const char*, bool)>&
                      key_validation_callback) override {
    return inner_->MultiGet(num_keys, keys, callback_args, callback_func,
                            allow_data_in_errors, detect_key_out_of_order,
                            key_validation_callback);
  }
  uint64_t ApproximateNumEntries(const Slice& start_ikey,
                                 const Slice& end_key) override {
    return inner_->ApproximateNumEntries(start_ikey, end_key);
  }
  void UniqueRandomSample(const uint64_t num_entries,
                          const uint64_t target_sample_size,
                          std::unordered_set<const char*>* entries) override {
    inner_->UniqueRandomSample(num_entries, target_sample_size, entries);
  }
  size_t ApproximateMemoryUsage() override {
    return inner_->ApproximateMemoryUsage();
  }
  Iterator* GetIterator(Arena* arena) override {
    return inner_->GetIterator(arena);
  }
  Iterator* GetDynamicPrefixIterator(Arena* arena) override {
    return inner_->GetDynamicPrefixIterator(arena);
  }
  bool IsMergeOperatorSupported() const override {
    return inner_->IsMergeOperatorSupported();
  }
  bool IsSnapshotSupported() const override {
    return inner_->IsSnapshotSupported();
  }

 private:
  // Slots per memtable (one with a single hint): a slot is 24 bytes, and
  // a hint in use some 220 more (the skip list's insert position at its
  // full height).
  static constexpr size_t kSlots = 1 << 14;

  // Taken by an insert while it uses `splice`; `seen`, `hash` and
  // `splice` change only under it.
  struct Slot {
    std::atomic<bool> busy{false};
    uint8_t seen = 0;
    uint64_t hash = 0;
    void* splice = nullptr;
  };

  // The hint prefix of a memtable entry (a varint32 length, then the
  // internal key: the stored key and 8 bytes of sequence and type); false
  // when the key is too short to have one.
  bool HintPrefix(const char* entry, Slice* prefix) const {
    uint32_t len = 0;
    int shift = 0;
    const unsigned char* p = reinterpret_cast<const unsigned char*>(entry);
    for (int i = 0; i < 5; ++i, ++p) {
      len |= static_cast<uint32_t>(*p & 0x7f) << shift;
      shift += 7;
      if ((*p & 0x80) == 0) {
        ++p;
        break;
      }
    }
    if (strip_ == kAll) {
      *prefix = Slice();
      return true;
    }
    if (len <= strip_ + kSeqLen) {
      return false;
    }
    *prefix = Slice(reinterpret_cast<const char*>(p), len - kSeqLen - strip_);
    return true;
  }

 public:
  // `strip` for a single hint: the whole key goes.
  static constexpr size_t kAll = static_cast<size_t>(-1) / 2;

 private:
  static constexpr size_t kSeqLen = 8;

  std::unique_ptr<MemTableRep> inner_;
  // Bytes cut from the end of the stored key to make its hint prefix, or
  // `kAll`.
  const size_t strip_;
  // Slots less one: a power of two less one, for the hash's low bits.
  const size_t mask_;
  std::unique_ptr<Slot[]> slots_;
};

// Creates `HintedRep`s over RocksDB's skip list. The name picks the hint
// prefix: `percolate.HintedSkipList.StripTs` (the write CF) or
// `percolate.HintedSkipList.One` (the lock CF).
class HintedFactory : public MemTableRepFactory {
 public:
  HintedFactory(std::string name, size_t strip)
      : name_(std::move(name)), strip_(strip) {}

  const char* Name() const override { return name_.c_str(); }

  using MemTableRepFactory::CreateMemTableRep;
  MemTableRep* CreateMemTableRep(const MemTableRep::KeyComparator& compare,
                                 Allocator* allocator,
                                 const SliceTransform* transform,
                                 Logger* logger) override {
    MemTableRep* inner =
        skip_list_.CreateMemTableRep(compare, allocator, transform, logger);
    return new HintedRep(inner, allocator, strip_);
  }

  bool IsInsertConcurrentlySupported() const override { return true; }
  bool CanHandleDuplicatedKey() const override { return true; }

 private:
  std::string name_;
  size_t strip_;
  SkipListFactory skip_list_;
};

constexpr const char* kHintedStripTs = "percolate.HintedSkipList.StripTs";
constexpr const char* kHintedOne = "percolate.HintedSkipList.One";

// Registers the factory named `name` (the name an options string gives
// it), whose memtables cut `kStrip` bytes from a key for its hint.
template <size_t kStrip>
void AddHinted(const char* name) {
  ObjectLibrary::Default()->AddFactory<MemTableRepFactory>(
      name,
      [](const std::string& uri, std::unique_ptr<MemTableRepFactory>* guard,
         std::string* /*errmsg*/) {
        guard->reset(new HintedFactory(uri, kStrip));
        return guard->get();
      });
}

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
    AddHinted<kTsLen>(kHintedStripTs);
    AddHinted<HintedRep::kAll>(kHintedOne);
  });
}

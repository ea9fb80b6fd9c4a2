//! The global address space: reservation, page access control and fault capture (the one
//! place that holds `unsafe` for mmap/userfaultfd), and the shared-heap allocator.

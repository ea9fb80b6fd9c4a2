//! The C API: `extern "C"` entry points behind `include/squall.h`, status codes and the
//! last error text per thread.

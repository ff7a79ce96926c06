// AddressSanitizer's defaults for every executable of the sanitizer build (EMMY_SANITIZE=ON; the runtime
// reads this function when the process starts).
//
// intercept_tls_get_addr=0: clang 14's LeakSanitizer records the dynamic TLS blocks of dlopen'ed libraries
// (NVRTC has some) by guessing their bounds, and when glibc's block begins 16 bytes into a page it takes
// ASan's own chunk header for a glibc 2.19 TLS header; the leak check at exit then scans from a stack-depot
// id as if it were an address and its tracer dies ("Tracer caught signal 11 ... LeakSanitizer has
// encountered a fatal error"). glibc allocates those blocks with malloc, so without the interception they
// stay reachable (and scanned) as heap chunks through the thread's DTV.
extern "C" const char* __asan_default_options() { return "intercept_tls_get_addr=0"; }

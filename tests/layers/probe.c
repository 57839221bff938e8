/* Compiled by tests/layers/meson.build with one layer's include paths and -DPROBE_HEADER: the
 * build must refuse a header of a layer above (should_fail), and accept the same header with
 * that layer's own paths (the control: the include path is the only difference). */
#include PROBE_HEADER

int main(void) { return 0; }

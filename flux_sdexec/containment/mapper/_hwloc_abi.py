"""libhwloc 2.x through cffi in ABI mode: the declarations this package uses, nothing else.

No compiler or build step: the library is opened with dlopen, so a checkout works
as it is. Only exported functions are declared (hwloc's helper.h inlines, such as
hwloc_get_next_osdev or hwloc_cpuset_to_nodeset, are not in the library and are
done in Python by the caller). The struct layouts follow hwloc.h of the 2.x ABI
(libhwloc.so.15); ``open_library`` refuses another major API version.
"""

import errno

from cffi import FFI

ffi = FFI()
ffi.cdef("""
typedef uint64_t hwloc_uint64_t;
typedef struct hwloc_bitmap_s * hwloc_bitmap_t;
typedef const struct hwloc_bitmap_s * hwloc_const_bitmap_t;
typedef struct hwloc_topology * hwloc_topology_t;

struct hwloc_info_s { char *name; char *value; };

struct hwloc_pcidev_attr_s {
    unsigned short domain;
    unsigned char bus, dev, func;
    unsigned short class_id;
    unsigned short vendor_id, device_id, subvendor_id, subdevice_id;
    unsigned char revision;
    float linkspeed;
};
struct hwloc_bridge_attr_s {
    union { struct hwloc_pcidev_attr_s pci; } upstream;
    int upstream_type;
    union { struct { unsigned short domain; unsigned char secondary_bus, subordinate_bus; } pci; }
        downstream;
    int downstream_type;
    unsigned depth;
};
/* only the members read here: every member of a union starts at offset 0 */
union hwloc_obj_attr_u {
    struct hwloc_pcidev_attr_s pcidev;
    struct hwloc_bridge_attr_s bridge;
};

struct hwloc_obj {
    int type;
    char *subtype;
    unsigned os_index;
    char *name;
    hwloc_uint64_t total_memory;
    union hwloc_obj_attr_u *attr;
    int depth;
    unsigned logical_index;
    struct hwloc_obj *next_cousin;
    struct hwloc_obj *prev_cousin;
    struct hwloc_obj *parent;
    unsigned sibling_rank;
    struct hwloc_obj *next_sibling;
    struct hwloc_obj *prev_sibling;
    unsigned arity;
    struct hwloc_obj **children;
    struct hwloc_obj *first_child;
    struct hwloc_obj *last_child;
    int symmetric_subtree;
    unsigned memory_arity;
    struct hwloc_obj *memory_first_child;
    unsigned io_arity;
    struct hwloc_obj *io_first_child;
    unsigned misc_arity;
    struct hwloc_obj *misc_first_child;
    hwloc_bitmap_t cpuset;
    hwloc_bitmap_t complete_cpuset;
    hwloc_bitmap_t nodeset;
    hwloc_bitmap_t complete_nodeset;
    struct hwloc_info_s *infos;
    unsigned infos_count;
    void *userdata;
    hwloc_uint64_t gp_index;
};
typedef struct hwloc_obj * hwloc_obj_t;

unsigned hwloc_get_api_version(void);
const char *hwloc_obj_type_string(int type);
int hwloc_topology_init(hwloc_topology_t *topologyp);
int hwloc_topology_set_flags(hwloc_topology_t topology, unsigned long flags);
int hwloc_topology_set_io_types_filter(hwloc_topology_t topology, int filter);
int hwloc_topology_set_icache_types_filter(hwloc_topology_t topology, int filter);
int hwloc_topology_set_xmlbuffer(hwloc_topology_t topology, const char *buffer, int size);
int hwloc_topology_load(hwloc_topology_t topology);
void hwloc_topology_destroy(hwloc_topology_t topology);
int hwloc_topology_export_xmlbuffer(hwloc_topology_t topology, char **xmlbuffer,
                                    int *buflen, unsigned long flags);
void hwloc_free_xmlbuffer(hwloc_topology_t topology, char *xmlbuffer);

int hwloc_get_type_depth(hwloc_topology_t topology, int type);
unsigned hwloc_get_nbobjs_by_depth(hwloc_topology_t topology, int depth);
hwloc_obj_t hwloc_get_obj_by_depth(hwloc_topology_t topology, int depth, unsigned idx);

hwloc_bitmap_t hwloc_bitmap_alloc(void);
void hwloc_bitmap_free(hwloc_bitmap_t bitmap);
int hwloc_bitmap_set(hwloc_bitmap_t bitmap, unsigned id);
int hwloc_bitmap_or(hwloc_bitmap_t res, hwloc_const_bitmap_t bitmap1,
                    hwloc_const_bitmap_t bitmap2);
int hwloc_bitmap_intersects(hwloc_const_bitmap_t bitmap1, hwloc_const_bitmap_t bitmap2);
int hwloc_bitmap_first(hwloc_const_bitmap_t bitmap);
int hwloc_bitmap_next(hwloc_const_bitmap_t bitmap, int prev);
""")

# enum hwloc_obj_type_e, in declaration order
OBJ_CORE = 2
OBJ_PU = 3
OBJ_NUMANODE = 13
OBJ_BRIDGE = 14
OBJ_PCI_DEVICE = 15
OBJ_OS_DEVICE = 16
# enum hwloc_get_type_depth_e
DEPTH_UNKNOWN = -1
DEPTH_MULTIPLE = -2
# enum hwloc_type_filter_e
FILTER_KEEP_STRUCTURE = 2
FILTER_KEEP_IMPORTANT = 3

_lib = None


def open_library():
    """The loaded libhwloc (opened once).

    Opened RTLD_GLOBAL: hwloc's plugins (PCI, OpenCL, CUDA, NVML, RSMI discovery on Debian
    and RHEL) resolve their symbols in the libhwloc already loaded, and fail to load with
    undefined symbols when it was opened RTLD_LOCAL, cffi's default.

    Raises:
        OSError: ENOSYS if libhwloc.so.15 cannot be opened or is not API version 2.
    """
    global _lib
    if _lib is None:
        try:
            lib = ffi.dlopen("libhwloc.so.15", ffi.RTLD_NOW | ffi.RTLD_GLOBAL)
        except OSError as exc:
            raise OSError(errno.ENOSYS, f"cannot open libhwloc: {exc}") from None
        version = lib.hwloc_get_api_version()
        if version >> 16 != 2:
            raise OSError(errno.ENOSYS, f"libhwloc API 0x{version:x} is not 2.x")
        _lib = lib
    return _lib

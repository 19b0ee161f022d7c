/* A stand-in for libnvidia-ml.so.1: the NVML entry points cohort-doctor asks, answering for two
 * made-up A100s behind NVSwitches. GPU 0 is healthy; GPU 1 has everything a node-acceptance
 * test must catch: a PCIe link trained at Gen3 x8 of Gen4 x16, one NVLink down, uncorrected ECC
 * errors, a pending row remap, hardware thermal slowdown, persistence off and MIG on.
 * Loaded by the doctor with dlopen (--nvml-library), never linked; C linkage, as NVML. */

#include <cstdio>
#include <cstring>

extern "C" {

typedef int nvmlReturn_t;
typedef struct fake_device* nvmlDevice_t;

struct fake_device {
  int index;
};

struct pci_info { /* nvmlPciInfo_t, v3 layout */
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};

enum { SUCCESS = 0, UNINITIALIZED = 1, INVALID_ARGUMENT = 2, NOT_SUPPORTED = 3 };

static fake_device devices[2] = {{0}, {1}};
static int initialized = 0;
static const unsigned buses[2] = {0x07, 0x0f};

static int valid(nvmlDevice_t device) {
  return initialized && (device == &devices[0] || device == &devices[1]);
}

nvmlReturn_t nvmlInit_v2(void) {
  initialized = 1;
  return SUCCESS;
}
nvmlReturn_t nvmlShutdown(void) {
  initialized = 0;
  return SUCCESS;
}
const char* nvmlErrorString(nvmlReturn_t status) {
  return status == SUCCESS ? "Success" : status == NOT_SUPPORTED ? "Not Supported" : "Error";
}
nvmlReturn_t nvmlSystemGetDriverVersion(char* text, unsigned length) {
  snprintf(text, length, "%s", "550.54.15");
  return SUCCESS;
}
nvmlReturn_t nvmlSystemGetNVMLVersion(char* text, unsigned length) {
  snprintf(text, length, "%s", "12.550.54.15");
  return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned* count) {
  if (!initialized) return UNINITIALIZED;
  *count = 2;
  return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t* device) {
  if (!initialized || index > 1) return INVALID_ARGUMENT;
  *device = &devices[index];
  return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* text, unsigned length) {
  if (!valid(device)) return INVALID_ARGUMENT;
  snprintf(text, length, "%s", "NVIDIA A100-SXM4-80GB");
  return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* text, unsigned length) {
  if (!valid(device)) return INVALID_ARGUMENT;
  snprintf(text, length, "GPU-fake-%d", device->index);
  return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, struct pci_info* info) {
  if (!valid(device)) return INVALID_ARGUMENT;
  memset(info, 0, sizeof(*info));
  info->domain = 0;
  info->bus = buses[device->index];
  info->device = 0;
  snprintf(info->bus_id, sizeof(info->bus_id), "00000000:%02X:00.0", info->bus);
  return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int* major, int* minor) {
  if (!valid(device)) return INVALID_ARGUMENT;
  *major = 8;
  *minor = 0;
  return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device, unsigned* value) {
  if (!valid(device)) return INVALID_ARGUMENT;
  *value = device->index == 0 ? 4 : 3;
  return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device, unsigned* value) {
  if (!valid(device)) return INVALID_ARGUMENT;
  *value = device->index == 0 ? 16 : 8;
  return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t device, unsigned* value) {
  if (!valid(device)) return INVALID_ARGUMENT;
  *value = 4;
  return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t device, unsigned* value) {
  if (!valid(device)) return INVALID_ARGUMENT;
  *value = 16;
  return SUCCESS;
}
/* 12 NVLinks each, all to NVSwitches; GPU 1's link 11 is down. */
nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned link, int* active) {
  if (!valid(device)) return INVALID_ARGUMENT;
  if (link >= 12) return INVALID_ARGUMENT;
  *active = !(device->index == 1 && link == 11);
  return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned link,
                                                 struct pci_info* info) {
  if (!valid(device) || link >= 12) return INVALID_ARGUMENT;
  memset(info, 0, sizeof(*info));
  info->bus = 0xc0 + link / 2; /* the switches */
  return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned link, int* type) {
  if (!valid(device) || link >= 12) return INVALID_ARGUMENT;
  *type = 2; /* NVSwitch */
  return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, int* current, int* pending) {
  if (!valid(device)) return INVALID_ARGUMENT;
  *current = 1;
  *pending = 1;
  return SUCCESS;
}
/* error type 0 corrected, 1 uncorrected; counter 0 volatile, 1 aggregate */
nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, int error_type, int counter,
                                         unsigned long long* count) {
  if (!valid(device)) return INVALID_ARGUMENT;
  if (device->index == 0) {
    *count = 0;
  } else {
    *count = error_type == 1 ? (counter == 0 ? 2 : 5) : 17;
  }
  return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned* corrected,
                                       unsigned* uncorrected, unsigned* pending,
                                       unsigned* failure) {
  if (!valid(device)) return INVALID_ARGUMENT;
  *corrected = 0;
  *uncorrected = device->index == 1 ? 3 : 0;
  *pending = device->index == 1;
  *failure = 0;
  return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device,
                                                       unsigned long long* reasons) {
  if (!valid(device)) return INVALID_ARGUMENT;
  *reasons = device->index == 0 ? 0x1ull : 0x40ull; /* idle; hardware thermal slowdown */
  return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, int* mode) {
  if (!valid(device)) return INVALID_ARGUMENT;
  *mode = device->index == 0;
  return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned* current, unsigned* pending) {
  if (!valid(device)) return INVALID_ARGUMENT;
  *current = device->index == 1;
  *pending = *current;
  return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor, unsigned* celsius) {
  if (!valid(device) || sensor != 0) return INVALID_ARGUMENT;
  *celsius = device->index == 0 ? 35 : 88;
  return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t a, nvmlDevice_t b, int* level) {
  if (!valid(a) || !valid(b)) return INVALID_ARGUMENT;
  *level = 50; /* system: they sit on different sockets */
  return SUCCESS;
}

}  // extern "C"

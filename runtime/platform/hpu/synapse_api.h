// The subset of the Intel Gaudi C APIs (Synapse and HCCL) the hpu backend uses, declared
// here from their documented signatures so that every build works without the Gaudi
// software (no vendor headers; the library is opened with dlopen, see synapse_library.h).
//
// Only what shardlab calls is declared. Layouts follow the public headers of the Gaudi
// software (synapse_common_types.h, synapse_api_types.h, hccl_types.h): TSize is 64-bit,
// HABANA_DIM_MAX is 25, tensor sizes are innermost dimension first. Anything that cannot
// be checked without a card is listed in docs/gaudi.md ("What is unverified").
//
// The test double (testing/fake_synapse.cc) defines these same extern "C" functions, so
// the prototypes below are checked against it by the compiler. The backend itself never
// links against them: it calls through the SynapseApi table of resolved pointers.
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {

// ---- Synapse types -------------------------------------------------------------------
typedef enum synStatus {
  synSuccess = 0,
  synInvalidArgument = 1,
  synOutOfHostMemory = 3,
  synOutOfDeviceMemory = 4,
  synObjectAlreadyInitialized = 5,
  synNoDeviceFound = 8,
  synDeviceAlreadyAcquired = 20,
  synBusy = 22,
  synFail = 26,
  synUninitialized = 28,
  synAlreadyInitialized = 29,
  synFailHccl = 40,
  synTimeout = 42,
  synStatusLast = 43,
} synStatus;

typedef enum synDmaDir { HOST_TO_DRAM = 0, DRAM_TO_HOST = 1, DRAM_TO_DRAM = 2 } synDmaDir;

typedef enum synDeviceType {
  synDeviceGaudi = 2,
  synDeviceGaudi2 = 4,
  synDeviceGaudi3 = 5,
  synDeviceTypeInvalid = 7,
} synDeviceType;

typedef enum synDataType {
  syn_type_na = 0,
  syn_type_bf16 = 1 << 1,
  syn_type_single = 1 << 2,  // fp32
  syn_type_int32 = 1 << 4,
  syn_type_fp16 = 1 << 8,
  syn_type_int64 = 1 << 15,
} synDataType;

typedef enum synTensorType { DATA_TENSOR = 0 } synTensorType;
typedef enum synGeometryType { synGeometryMinSizes = 0, synGeometryMaxSizes = 1, synGeometrySizes = 1 } synGeometryType;

typedef uint32_t synDeviceId;
typedef uint32_t synModuleId;
typedef uint64_t TSize;
typedef struct SynStreamOpaque* synStreamHandle;
typedef struct SynEventOpaque* synEventHandle;
typedef struct SynGraphOpaque* synGraphHandle;
typedef struct SynRecipeOpaque* synRecipeHandle;
typedef struct SynSectionOpaque* synSectionHandle;
typedef struct SynTensorOpaque* synTensor;

#define SHARDLAB_HABANA_DIM_MAX 25
#define SHARDLAB_SYN_FLAGS_TENSOR_NAME 0x1u

// The leading fields of synDeviceInfo. The library may write a few more bytes than
// declared in some versions, so callers pass a SynDeviceInfoBuffer (padded).
typedef struct synDeviceInfo {
  uint64_t sramBaseAddress;
  uint64_t dramBaseAddress;
  uint32_t sramSize;
  uint64_t dramSize;
  uint64_t tpcEnabledMask;
  uint8_t dramEnabled;
  uint32_t deviceId;
  uint32_t fd;
  synDeviceType deviceType;
} synDeviceInfo;

typedef struct synTensorGeometry {
  TSize sizes[SHARDLAB_HABANA_DIM_MAX];
  uint32_t dims;
} synTensorGeometry;

typedef struct synTensorDeviceFullLayout {
  uint32_t strides[SHARDLAB_HABANA_DIM_MAX];
  synDataType deviceDataType;
} synTensorDeviceFullLayout;

typedef struct synLaunchTensorInfoExt {
  const char* tensorName;
  uint64_t pTensorAddress;
  synTensorType tensorType;
  TSize tensorSize[SHARDLAB_HABANA_DIM_MAX];
  uint64_t tensorId;
} synLaunchTensorInfoExt;

// Node parameter structs (TPC/MME kernels take the exact size of the version filled).
typedef struct synGEMMParams {
  bool transpose_a;
  bool transpose_b;
} synGEMMParams;
typedef struct synTransposeParams {
  uint32_t permutation[SHARDLAB_HABANA_DIM_MAX];  // TransposePermutationDim values
  unsigned int tensorDim;
} synTransposeParams;
typedef struct ShardlabGeluParams {  // ns_GeluKernel::Params
  bool approximation;
} ShardlabGeluParams;
typedef struct ShardlabLayerNormParams {  // ns_LayerNormKernel::Params
  bool epsValid;
  float eps;
} ShardlabLayerNormParams;
typedef struct ShardlabGatherParams {  // ns_GatherKernel::Params
  int axis;
} ShardlabGatherParams;
typedef struct ShardlabConstantParams {  // ns_ConstantKernel::Params
  float constant;
} ShardlabConstantParams;
typedef struct ShardlabReductionParams {  // ns_Reduction::Params
  unsigned reductionDimension;            // innermost first
} ShardlabReductionParams;
typedef struct ShardlabSoftmaxParams {  // ns_Softmax::Params
  int dim;                              // innermost first
} ShardlabSoftmaxParams;

// ---- HCCL types ----------------------------------------------------------------------
typedef struct HcclCommOpaque* hcclComm_t;
typedef enum hcclResult_t {
  hcclSuccess = 0,
  hcclUnhandledSynapseError = 1,
  hcclSystemError = 2,
  hcclInternalError = 3,
  hcclInvalidArgument = 4,
  hcclInvalidUsage = 5,
  hcclRemoteError = 6,
  hcclInProgress = 7,
} hcclResult_t;
typedef enum hcclDataType_t {
  hcclInt8 = 0,
  hcclUint8 = 1,
  hcclInt32 = 2,
  hcclUint32 = 3,
  hcclInt64 = 4,
  hcclUint64 = 5,
  hcclFloat16 = 6,
  hcclFloat32 = 7,
  hcclFloat64 = 8,
  hcclBfloat16 = 9,
} hcclDataType_t;
typedef enum hcclRedOp_t { hcclSum = 0, hcclProd = 1, hcclMin = 2, hcclMax = 3, hcclAvg = 4 } hcclRedOp_t;
#define SHARDLAB_HCCL_UNIQUE_ID_BYTES 1024
typedef struct hcclUniqueId {
  char internal[SHARDLAB_HCCL_UNIQUE_ID_BYTES];
  size_t length;
} hcclUniqueId;

// ---- prototypes (X-macro: name, return type, parameter list) ---------------------------
#define SHARDLAB_SYNAPSE_FUNCTIONS(X)                                                                                  \
  X(synInitialize, synStatus, (void))                                                                                  \
  X(synDestroy, synStatus, (void))                                                                                     \
  X(synDeviceGetCount, synStatus, (uint32_t * pCount))                                                                 \
  X(synDeviceAcquireByModuleId, synStatus, (synDeviceId * pDeviceId, const synModuleId moduleId))                      \
  X(synDeviceRelease, synStatus, (synDeviceId deviceId))                                                               \
  X(synDeviceGetInfo, synStatus, (synDeviceId deviceId, synDeviceInfo * pDeviceInfo))                                  \
  X(synDeviceGetMemoryInfo, synStatus, (synDeviceId deviceId, uint64_t * free, uint64_t * total))                      \
  X(synDeviceMalloc, synStatus,                                                                                        \
    (synDeviceId deviceId, uint64_t size, uint64_t reqAddr, uint32_t flags, uint64_t * buffer))                        \
  X(synDeviceFree, synStatus, (synDeviceId deviceId, uint64_t buffer, uint32_t flags))                                 \
  X(synHostMalloc, synStatus, (synDeviceId deviceId, uint64_t size, uint32_t flags, void** buffer))                    \
  X(synHostFree, synStatus, (synDeviceId deviceId, const void* buffer, uint32_t flags))                                \
  X(synStreamCreateGeneric, synStatus, (synStreamHandle * pStreamHandle, synDeviceId deviceId, uint32_t flags))        \
  X(synStreamDestroy, synStatus, (synStreamHandle streamHandle))                                                       \
  X(synStreamSynchronize, synStatus, (synStreamHandle streamHandle))                                                   \
  X(synStreamWaitEvent, synStatus, (synStreamHandle streamHandle, synEventHandle eventHandle, uint32_t flags))         \
  X(synEventCreate, synStatus, (synEventHandle * pEventHandle, synDeviceId deviceId, uint32_t flags))                  \
  X(synEventDestroy, synStatus, (synEventHandle eventHandle))                                                          \
  X(synEventRecord, synStatus, (synEventHandle eventHandle, synStreamHandle streamHandle))                             \
  X(synEventQuery, synStatus, (synEventHandle eventHandle))                                                            \
  X(synEventSynchronize, synStatus, (synEventHandle eventHandle))                                                      \
  X(synMemCopyAsync, synStatus,                                                                                        \
    (synStreamHandle streamHandle, uint64_t src, uint64_t size, uint64_t dst, synDmaDir direction))                    \
  X(synGraphCreate, synStatus, (synGraphHandle * pGraphHandle, synDeviceType deviceType))                              \
  X(synGraphDestroy, synStatus, (synGraphHandle graphHandle))                                                          \
  X(synTensorHandleCreate, synStatus,                                                                                  \
    (synTensor * tensor, synGraphHandle graph, synTensorType type, const char* tensorName))                            \
  X(synTensorSetGeometry, synStatus,                                                                                   \
    (synTensor tensor, const synTensorGeometry* geometry, synGeometryType geometryType))                               \
  X(synTensorSetDeviceFullLayout, synStatus, (synTensor tensor, const synTensorDeviceFullLayout* layout))              \
  X(synTensorDestroy, synStatus, (synTensor tensor))                                                                   \
  X(synSectionCreate, synStatus, (synSectionHandle * sectionHandle, uint64_t sectionDescriptor, synGraphHandle graph)) \
  X(synSectionDestroy, synStatus, (synSectionHandle sectionHandle))                                                    \
  X(synTensorAssignToSection, synStatus, (synTensor tensor, synSectionHandle section, uint64_t byteOffset))            \
  X(synNodeCreate, synStatus,                                                                                          \
    (synGraphHandle graphHandle, const synTensor* pInputsTensorList, const synTensor* pOutputsTensorList,              \
     uint32_t numberInputs, uint32_t numberOutputs, const void* pUserParams, unsigned paramsSize, const char* pGuid,   \
     const char* pName, const char** inputLayouts, const char** outputLayouts))                                        \
  X(synGraphCompile, synStatus,                                                                                        \
    (synRecipeHandle * pRecipeHandle, synGraphHandle graphHandle, const char* pRecipeName, const char* pBuildLog))     \
  X(synWorkspaceGetSize, synStatus, (uint64_t * pWorkspaceSize, synRecipeHandle recipeHandle))                         \
  X(synLaunchExt, synStatus,                                                                                           \
    (synStreamHandle streamHandle, const synLaunchTensorInfoExt* launchTensorsInfo, uint32_t numberTensors,            \
     uint64_t pWorkspace, synRecipeHandle pRecipeHandle, uint32_t flags))                                              \
  X(synRecipeDestroy, synStatus, (synRecipeHandle recipeHandle))

#define SHARDLAB_HCCL_FUNCTIONS(X)                                                                                     \
  X(hcclGetUniqueId, hcclResult_t, (hcclUniqueId * uniqueId))                                                          \
  X(hcclCommInitRank, hcclResult_t, (hcclComm_t * comm, int nranks, hcclUniqueId commId, int rank))                    \
  X(hcclCommDestroy, hcclResult_t, (hcclComm_t comm))                                                                  \
  X(hcclCommAbort, hcclResult_t, (hcclComm_t comm))                                                                    \
  X(hcclCommGetAsyncError, hcclResult_t, (hcclComm_t comm, hcclResult_t * asyncError))                                 \
  X(hcclGetErrorString, const char*, (hcclResult_t result))                                                            \
  X(hcclAllGather, hcclResult_t,                                                                                       \
    (const void* sendbuff, void* recvbuff, size_t sendcount, hcclDataType_t datatype, hcclComm_t comm, void* stream))  \
  X(hcclReduceScatter, hcclResult_t,                                                                                   \
    (const void* sendbuff, void* recvbuff, size_t recvcount, hcclDataType_t datatype, hcclRedOp_t op, hcclComm_t comm, \
     void* stream))                                                                                                    \
  X(hcclAllReduce, hcclResult_t,                                                                                       \
    (const void* sendbuff, void* recvbuff, size_t count, hcclDataType_t datatype, hcclRedOp_t op, hcclComm_t comm,     \
     void* stream))                                                                                                    \
  X(hcclBroadcast, hcclResult_t,                                                                                       \
    (const void* sendbuff, void* recvbuff, size_t count, hcclDataType_t datatype, int root, hcclComm_t comm,           \
     void* stream))                                                                                                    \
  X(hcclSend, hcclResult_t,                                                                                            \
    (const void* sendbuff, size_t count, hcclDataType_t datatype, int peer, hcclComm_t comm, void* stream))            \
  X(hcclRecv, hcclResult_t,                                                                                            \
    (void* recvbuff, size_t count, hcclDataType_t datatype, int peer, hcclComm_t comm, void* stream))

#define SHARDLAB_DECLARE_PROTOTYPE(name, ret, params) ret name params;
SHARDLAB_SYNAPSE_FUNCTIONS(SHARDLAB_DECLARE_PROTOTYPE)
SHARDLAB_HCCL_FUNCTIONS(SHARDLAB_DECLARE_PROTOTYPE)
#undef SHARDLAB_DECLARE_PROTOTYPE

}  // extern "C"

namespace shardlab::runtime::device::hpu {

// Resolved entry points of one opened library (null until resolved).
struct SynapseApi {
#define SHARDLAB_DECLARE_POINTER(name, ret, params) ret(*name) params = nullptr;
  SHARDLAB_SYNAPSE_FUNCTIONS(SHARDLAB_DECLARE_POINTER)
  SHARDLAB_HCCL_FUNCTIONS(SHARDLAB_DECLARE_POINTER)
#undef SHARDLAB_DECLARE_POINTER
  bool has_hccl = false;  // every hccl* symbol resolved
};

// synDeviceGetInfo writes into this (padded against newer, longer layouts).
struct SynDeviceInfoBuffer {
  synDeviceInfo info{};
  unsigned char padding[512]{};
};

}  // namespace shardlab::runtime::device::hpu

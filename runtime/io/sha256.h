// SHA-256 (FIPS 180-4) through OpenSSL's libcrypto: the checksums of checkpoint files
// (runtime/fsdp/checkpoint.h).
#pragma once

#include <string>
#include <string_view>

namespace shardlab::runtime::io {

// The digest of `bytes` as 64 lowercase hex digits.
std::string sha256_hex(std::string_view bytes);

}  // namespace shardlab::runtime::io

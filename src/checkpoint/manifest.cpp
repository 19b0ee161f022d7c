// The manifest's JSON form. Parsing is strict: a checkpoint that was written by cohort has every
// field, so anything missing or mistyped is damage, reported by name.

#include <cohort/checkpoint/checksum.hpp>
#include <cohort/checkpoint/manifest.hpp>

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <string>

namespace cohort {
namespace {

using Json = nlohmann::json;

/// Throws "malformed checkpoint manifest: <what>", with the caller's file and line.
[[noreturn]] void fail(const std::string& what, const char* file = __builtin_FILE(),
                       int line = __builtin_LINE()) {
  detail::throw_error<CheckpointError>("malformed checkpoint manifest: " + what, file, line);
}

const Json& field(const Json& object, const char* name, const std::string& where) {
  if (!object.is_object()) fail(where + " is not an object");
  const auto found = object.find(name);
  if (found == object.end()) fail(where + " has no \"" + name + "\"");
  return *found;
}

std::uint64_t unsigned_field(const Json& object, const char* name, const std::string& where) {
  const Json& value = field(object, name, where);
  if (!value.is_number_unsigned()) fail(where + "." + name + " is not a non-negative integer");
  return value.get<std::uint64_t>();
}

std::int64_t signed_field(const Json& object, const char* name, const std::string& where) {
  const Json& value = field(object, name, where);
  if (!value.is_number_integer()) fail(where + "." + name + " is not an integer");
  if (value.is_number_unsigned() &&
      value.get<std::uint64_t>() >
          static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    fail(where + "." + name + " is out of range");
  }
  return value.get<std::int64_t>();
}

std::string string_field(const Json& object, const char* name, const std::string& where) {
  const Json& value = field(object, name, where);
  if (!value.is_string()) fail(where + "." + name + " is not a string");
  return value.get<std::string>();
}

bool bool_field(const Json& object, const char* name, const std::string& where) {
  const Json& value = field(object, name, where);
  if (!value.is_boolean()) fail(where + "." + name + " is not true or false");
  return value.get<bool>();
}

float float_field(const Json& object, const char* name, const std::string& where) {
  const Json& value = field(object, name, where);
  if (!value.is_number()) fail(where + "." + name + " is not a number");
  const double number = value.get<double>();
  if (!(std::fabs(number) <= static_cast<double>(std::numeric_limits<float>::max()))) {
    fail(where + "." + name + " is not a finite float");
  }
  return static_cast<float>(number);
}

DType dtype_field(const Json& object, const char* name, const std::string& where) {
  const std::string text = string_field(object, name, where);
  const std::optional<DType> dtype = parse_dtype(text);
  if (!dtype) fail(where + "." + name + " is not a dtype: \"" + text + "\"");
  return *dtype;
}

std::uint64_t checksum_field(const Json& object, const char* name, const std::string& where) {
  std::uint64_t digest = 0;
  if (!checksum_from_hex(string_field(object, name, where), digest)) {
    fail(where + "." + name + " is not 16 hex digits");
  }
  return digest;
}

const Json& array_field(const Json& object, const char* name, const std::string& where) {
  const Json& value = field(object, name, where);
  if (!value.is_array()) fail(where + "." + name + " is not an array");
  return value;
}

void check_pieces(const Manifest& manifest, const ManifestArray& array, const std::string& where) {
  std::uint64_t next = 0;
  const std::uint64_t element_bytes = size_of(array.dtype);
  for (std::size_t i = 0; i < array.pieces.size(); ++i) {
    const ManifestPiece& piece = array.pieces[i];
    const std::string at = where + ".pieces[" + std::to_string(i) + "]";
    if (piece.element_offset != next) {
      fail(at + " starts at element " + std::to_string(piece.element_offset) + ", expected " +
           std::to_string(next));
    }
    if (piece.file >= manifest.files.size())
      fail(at + " names file " + std::to_string(piece.file) + ", which is not listed");
    if (piece.count > array.count - next) fail(at + " runs past the array's end");
    const std::uint64_t file_bytes = manifest.files[piece.file].bytes;
    if (piece.byte_offset > file_bytes ||
        piece.count > (file_bytes - piece.byte_offset) / element_bytes) {
      fail(at + " lies outside " + manifest.files[piece.file].name);
    }
    next += piece.count;
  }
  if (next != array.count) {
    fail(where + " covers " + std::to_string(next) + " of its " + std::to_string(array.count) +
         " elements");
  }
}

}  // namespace

const ManifestArray* Manifest::find_array(std::string_view name) const noexcept {
  for (const ManifestArray& array : arrays) {
    if (array.name == name) return &array;
  }
  return nullptr;
}

std::string to_json(const Manifest& manifest) {
  Json out;
  out["format_version"] = manifest.format_version;
  out["cohort_version"] = manifest.cohort_version;
  out["world_size"] = manifest.world_size;
  out["registry_fingerprint"] = manifest.registry_fingerprint;
  out["arena_dtype"] = std::string(to_string(manifest.arena_dtype));
  out["used_count"] = manifest.used_count;
  Json params = Json::array();
  for (const ManifestParam& param : manifest.params) {
    params.push_back({{"name", param.name},
                      {"shape", param.shape},
                      {"dtype", std::string(to_string(param.dtype))},
                      {"offset", param.offset}});
  }
  out["params"] = std::move(params);
  out["optimizer"] = {{"rule", manifest.optimizer_rule},
                      {"sharded", manifest.optimizer_sharded},
                      {"steps", manifest.optimizer_steps},
                      {"learning_rate", manifest.learning_rate}};
  if (manifest.loss_scaler) {
    const ManifestLossScaler& scaler = *manifest.loss_scaler;
    out["loss_scaler"] = {{"scale", scaler.scale},
                          {"growth_tracker", scaler.growth_tracker},
                          {"skipped_steps", scaler.skipped_steps},
                          {"last_step_skipped", scaler.last_step_skipped}};
  } else {
    out["loss_scaler"] = nullptr;
  }
  out["step"] = manifest.step;
  out["epoch"] = manifest.epoch;
  out["data_position"] = manifest.data_position;
  Json files = Json::array();
  for (const ManifestFile& file : manifest.files) {
    files.push_back(
        {{"name", file.name}, {"bytes", file.bytes}, {"checksum", checksum_to_hex(file.checksum)}});
  }
  out["files"] = std::move(files);
  Json arrays = Json::array();
  for (const ManifestArray& array : manifest.arrays) {
    Json pieces = Json::array();
    for (const ManifestPiece& piece : array.pieces) {
      pieces.push_back({{"file", piece.file},
                        {"element_offset", piece.element_offset},
                        {"count", piece.count},
                        {"byte_offset", piece.byte_offset},
                        {"checksum", checksum_to_hex(piece.checksum)}});
    }
    arrays.push_back({{"name", array.name},
                      {"dtype", std::string(to_string(array.dtype))},
                      {"count", array.count},
                      {"pieces", std::move(pieces)}});
  }
  out["arrays"] = std::move(arrays);
  return out.dump(1) + "\n";
}

Manifest parse_manifest(std::string_view text) {
  Json root;
  try {
    root = Json::parse(text.begin(), text.end());
  } catch (const Json::exception& error) {
    fail(std::string("not JSON (") + error.what() + ")");
  }
  const std::string top = "manifest";
  Manifest manifest;
  const std::int64_t format = signed_field(root, "format_version", top);
  if (format < 1 || format > kCheckpointFormatVersion) {
    COHORT_FAIL(CheckpointError, "checkpoint format version " + std::to_string(format) +
                                     " is not one this cohort reads (1 to " +
                                     std::to_string(kCheckpointFormatVersion) +
                                     "): load it with a newer cohort");
  }
  manifest.format_version = static_cast<int>(format);
  manifest.cohort_version = string_field(root, "cohort_version", top);
  const std::uint64_t world_size = unsigned_field(root, "world_size", top);
  if (world_size < 1 || world_size > (1u << 24))
    fail("world_size " + std::to_string(world_size) + " is out of range");
  manifest.world_size = static_cast<int>(world_size);
  manifest.registry_fingerprint = string_field(root, "registry_fingerprint", top);
  manifest.arena_dtype = dtype_field(root, "arena_dtype", top);
  manifest.used_count = unsigned_field(root, "used_count", top);

  const Json& params = array_field(root, "params", top);
  for (std::size_t i = 0; i < params.size(); ++i) {
    const std::string at = "params[" + std::to_string(i) + "]";
    ManifestParam param;
    param.name = string_field(params[i], "name", at);
    for (const Json& extent : array_field(params[i], "shape", at)) {
      if (!extent.is_number_unsigned()) fail(at + ".shape holds something other than a size");
      param.shape.push_back(extent.get<std::uint64_t>());
    }
    param.dtype = dtype_field(params[i], "dtype", at);
    param.offset = unsigned_field(params[i], "offset", at);
    manifest.params.push_back(std::move(param));
  }

  const Json& optimizer = field(root, "optimizer", top);
  manifest.optimizer_rule = string_field(optimizer, "rule", "optimizer");
  manifest.optimizer_sharded = bool_field(optimizer, "sharded", "optimizer");
  manifest.optimizer_steps = signed_field(optimizer, "steps", "optimizer");
  manifest.learning_rate = float_field(optimizer, "learning_rate", "optimizer");
  const Json& scaler = field(root, "loss_scaler", top);
  if (!scaler.is_null()) {
    ManifestLossScaler state;
    state.scale = float_field(scaler, "scale", "loss_scaler");
    const std::int64_t growth = signed_field(scaler, "growth_tracker", "loss_scaler");
    if (growth < 0 || growth > std::numeric_limits<std::int32_t>::max()) {
      fail("loss_scaler.growth_tracker is out of range");
    }
    state.growth_tracker = static_cast<std::int32_t>(growth);
    state.skipped_steps = signed_field(scaler, "skipped_steps", "loss_scaler");
    state.last_step_skipped = bool_field(scaler, "last_step_skipped", "loss_scaler");
    manifest.loss_scaler = state;
  }
  manifest.step = signed_field(root, "step", top);
  manifest.epoch = unsigned_field(root, "epoch", top);
  manifest.data_position = unsigned_field(root, "data_position", top);

  const Json& files = array_field(root, "files", top);
  for (std::size_t i = 0; i < files.size(); ++i) {
    const std::string at = "files[" + std::to_string(i) + "]";
    ManifestFile file;
    file.name = string_field(files[i], "name", at);
    if (file.name.empty() || file.name.find('/') != std::string::npos || file.name[0] == '.') {
      fail(at + ".name \"" + file.name + "\" is not a plain file name");
    }
    file.bytes = unsigned_field(files[i], "bytes", at);
    file.checksum = checksum_field(files[i], "checksum", at);
    manifest.files.push_back(std::move(file));
  }
  const Json& arrays = array_field(root, "arrays", top);
  for (std::size_t i = 0; i < arrays.size(); ++i) {
    const std::string at = "arrays[" + std::to_string(i) + "]";
    ManifestArray array;
    array.name = string_field(arrays[i], "name", at);
    array.dtype = dtype_field(arrays[i], "dtype", at);
    array.count = unsigned_field(arrays[i], "count", at);
    const Json& pieces = array_field(arrays[i], "pieces", at);
    for (std::size_t j = 0; j < pieces.size(); ++j) {
      const std::string piece_at = at + ".pieces[" + std::to_string(j) + "]";
      ManifestPiece piece;
      const std::uint64_t file = unsigned_field(pieces[j], "file", piece_at);
      if (file > std::numeric_limits<std::uint32_t>::max())
        fail(piece_at + ".file is out of range");
      piece.file = static_cast<std::uint32_t>(file);
      piece.element_offset = unsigned_field(pieces[j], "element_offset", piece_at);
      piece.count = unsigned_field(pieces[j], "count", piece_at);
      piece.byte_offset = unsigned_field(pieces[j], "byte_offset", piece_at);
      piece.checksum = checksum_field(pieces[j], "checksum", piece_at);
      array.pieces.push_back(piece);
    }
    if (manifest.find_array(array.name) != nullptr)
      fail(at + " repeats the name \"" + array.name + "\"");
    check_pieces(manifest, array, at + " (\"" + array.name + "\")");
    manifest.arrays.push_back(std::move(array));
  }
  return manifest;
}

}  // namespace cohort

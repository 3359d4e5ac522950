#include "clients/client_codes.hpp"

namespace ipcfloor {

int code_for(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::invalid_argument: return IPCFLOOR_E_INVALID;
    case ErrorCode::bad_data: return IPCFLOOR_E_BAD_SEGMENT;
    case ErrorCode::io: return IPCFLOOR_E_IO;
    case ErrorCode::resource: return IPCFLOOR_E_RESOURCE;
    case ErrorCode::permission: return IPCFLOOR_E_PERMISSION;
    case ErrorCode::version_mismatch: return IPCFLOOR_E_VERSION;
    case ErrorCode::peer_gone: return IPCFLOOR_E_NO_ENGINE;
    case ErrorCode::timeout: return IPCFLOOR_E_TIMEOUT;
    case ErrorCode::busy: return IPCFLOOR_E_BUSY;
    case ErrorCode::protocol: return IPCFLOOR_E_CORRUPT;
    case ErrorCode::strategy: return IPCFLOOR_E_REJECTED;
  }
  return IPCFLOOR_E_INTERNAL;
}

int code_for(CallStatus status) noexcept {
  switch (status) {
    case CallStatus::ok: return IPCFLOOR_OK;
    case CallStatus::timeout: return IPCFLOOR_E_TIMEOUT;
    case CallStatus::engine_hung: return IPCFLOOR_E_ENGINE_HUNG;
    case CallStatus::engine_gone: return IPCFLOOR_E_ENGINE_GONE;
    case CallStatus::corrupt:
    case CallStatus::out_of_order: return IPCFLOOR_E_CORRUPT;
    case CallStatus::too_large: return IPCFLOOR_E_INVALID;
    case CallStatus::interrupted: return IPCFLOOR_E_INTERRUPTED;
    case CallStatus::engine_restarted: return IPCFLOOR_E_ENGINE_RESTARTED;
    case CallStatus::empty: break;
  }
  return IPCFLOOR_E_INTERNAL;
}

int code_for(std::uint16_t status) noexcept {
  switch (static_cast<Status>(status)) {
    case Status::ok: return IPCFLOOR_OK;
    case Status::window_out_of_range: return IPCFLOOR_E_WINDOW;
    case Status::not_live: return IPCFLOOR_E_NOT_LIVE;
    case Status::capacity_full: return IPCFLOOR_E_CAPACITY_FULL;
    case Status::bad_price: return IPCFLOOR_E_BAD_PRICE;
    case Status::not_the_writer: return IPCFLOOR_E_NOT_WRITER;
    case Status::no_room: return IPCFLOOR_E_NO_ROOM;
    case Status::no_such_series: return IPCFLOOR_E_NO_SUCH_SERIES;
    case Status::no_such_strategy: return IPCFLOOR_E_NO_SUCH_STRATEGY;
    case Status::no_live_step: return IPCFLOOR_E_NO_LIVE_STEP;
    case Status::signals_full: return IPCFLOOR_E_SIGNALS_FULL;
    case Status::no_trade_report: return IPCFLOOR_E_NO_TRADE_REPORT;
    case Status::missing_column: return IPCFLOOR_E_MISSING_COLUMN;
    case Status::bad_range: return IPCFLOOR_E_BAD_RANGE;
    case Status::bad_option: return IPCFLOOR_E_INVALID;
    case Status::journal_full: return IPCFLOOR_E_JOURNAL_FULL;
    case Status::journal_failed: return IPCFLOOR_E_JOURNAL_FAILED;
    case Status::subscribers_behind: return IPCFLOOR_E_SUBSCRIBERS_BEHIND;
    default: return IPCFLOOR_E_REJECTED;
  }
}

const char* column_name(std::uint64_t bit) noexcept {
  switch (bit) {
    case IPCFLOOR_COLUMN_CLOSE: return "close";
    case IPCFLOOR_COLUMN_OPEN: return "open";
    case IPCFLOOR_COLUMN_HIGH: return "high";
    case IPCFLOOR_COLUMN_LOW: return "low";
    case IPCFLOOR_COLUMN_VOLUME: return "volume";
    default: return "a column";
  }
}

}  // namespace ipcfloor

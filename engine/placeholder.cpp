// Keeps ipcfloor_engine non-empty until the kernel lands.
namespace ipcfloor { int engine_placeholder() { return 0; } }

// A shared library WITHOUT the plugin entry symbol (loader test).
extern "C" int pdserve_not_a_plugin_marker(void) { return 42; }

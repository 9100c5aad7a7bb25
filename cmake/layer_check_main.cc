// An empty program: runtime/CMakeLists.txt links each runtime layer into it whole, with
// only the layers it declares below it, so a call into a layer above fails to link.
int main() { return 0; }

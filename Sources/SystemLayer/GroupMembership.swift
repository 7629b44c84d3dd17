import Glibc

/// Whether a user belongs to a group, from the password and group databases (NSS: files, LDAP…), for checks of
/// who owns what in a group-shared container (`groupctl doctor`).
package enum GroupMembership {
  /// Whether `uid` has `gid` as its primary group or is listed among the group's members. An unknown user or
  /// group is no member. The corresponding C functions are `getpwuid_r` and `getgrgid_r`.
  package static func contains(uid: UInt32, gid: UInt32) -> Bool {
    // The records point into these buffers: they must stay put while read (an inout array need not).
    let size = 64 * 1024
    let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: size)
    defer { buffer.deallocate() }
    var user = passwd()
    var found: UnsafeMutablePointer<passwd>?
    guard getpwuid_r(uid, &user, buffer, size, &found) == 0, found != nil else { return false }
    if user.pw_gid == gid { return true }
    let name = String(cString: user.pw_name)
    var group = Glibc.group()
    var foundGroup: UnsafeMutablePointer<Glibc.group>?
    guard getgrgid_r(gid, &group, buffer, size, &foundGroup) == 0, foundGroup != nil, var member = group.gr_mem
    else { return false }
    while let entry = member.pointee {
      if String(cString: entry) == name { return true }
      member += 1
    }
    return false
  }
}

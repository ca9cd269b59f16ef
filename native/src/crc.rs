//! CRC-32 (IEEE 802.3, reflected: zlib's `crc32`), the partition function of the flows'
//! routing (`crc32(key's UTF-8) % P`), the same on every process and run as Python's.

/// CRC-32 of `data`, as `zlib.crc32(data)`.
pub fn crc32(data: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut table = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 != 0 { 0xEDB8_8320 ^ (c >> 1) } else { c >> 1 };
                k += 1;
            }
            table[i] = c;
            i += 1;
        }
        table
    };
    !data.iter().fold(!0u32, |c, &b| TABLE[((c ^ u32::from(b)) & 0xff) as usize] ^ (c >> 8))
}

#[cfg(test)]
mod tests {
    #[test]
    fn crc32_is_zlibs() {
        assert_eq!(super::crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(super::crc32(b""), 0);
        assert_eq!(super::crc32("é".as_bytes()), 0x0E04_8D3E);
        assert_eq!(super::crc32(b"player-000001"), 0xAAB6_62AC);
        assert_eq!(super::crc32(b"w1"), 0x7079_FDF4);
    }
}

//! Metadata values that borrow the file's bytes, and arrays that are iterated lazily.

use super::cursor::{Cursor, Short};
use super::types::ValueType;

/// Deepest nesting of arrays a file may use (an array of scalars has depth 1). Real files use
/// at most 2; the cap bounds the reader's recursion.
pub const MAX_ARRAY_DEPTH: usize = 8;

/// One metadata value. Strings and arrays borrow the file's bytes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value<'a> {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(&'a str),
    Array(Array<'a>),
    U64(u64),
    I64(i64),
    F64(f64),
}

macro_rules! as_scalar {
    ($($name:ident: $variant:ident -> $ty:ty),* $(,)?) => {
        $(
            #[doc = concat!("The value if it is a `", stringify!($variant), "`.")]
            pub fn $name(&self) -> Option<$ty> {
                match *self {
                    Value::$variant(v) => Some(v),
                    _ => None,
                }
            }
        )*
    };
}

impl<'a> Value<'a> {
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::F32(_) => ValueType::F32,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(_) => ValueType::Array,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F64(_) => ValueType::F64,
        }
    }

    as_scalar!(
        as_u8: U8 -> u8,
        as_i8: I8 -> i8,
        as_u16: U16 -> u16,
        as_i16: I16 -> i16,
        as_u32: U32 -> u32,
        as_i32: I32 -> i32,
        as_f32: F32 -> f32,
        as_bool: Bool -> bool,
        as_u64: U64 -> u64,
        as_i64: I64 -> i64,
        as_f64: F64 -> f64,
        as_str: String -> &'a str,
        as_array: Array -> Array<'a>,
    );

    /// The value of any unsigned integer type, widened.
    pub fn as_unsigned(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            _ => None,
        }
    }

    /// The value of any signed or unsigned integer type that fits an `i64`.
    pub fn as_integer(&self) -> Option<i64> {
        match *self {
            Value::I8(v) => Some(v.into()),
            Value::I16(v) => Some(v.into()),
            Value::I32(v) => Some(v.into()),
            Value::I64(v) => Some(v),
            _ => self.as_unsigned().and_then(|v| i64::try_from(v).ok()),
        }
    }
}

/// An array value: its element type, its length and its encoded elements, which were checked
/// when the file was parsed and are decoded one by one as they are iterated.
#[derive(Clone, Copy)]
pub struct Array<'a> {
    elem: ValueType,
    len: usize,
    depth: usize,
    bytes: &'a [u8],
}

impl<'a> Array<'a> {
    pub fn elem_type(&self) -> ValueType {
        self.elem
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The encoded elements as they lie in the file (for fixed-size element types, `len`
    /// little-endian values back to back).
    pub fn raw_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    pub fn iter(&self) -> ArrayIter<'a> {
        ArrayIter { elem: self.elem, depth: self.depth, left: self.len, cursor: Cursor::new(self.bytes) }
    }

    /// Element `i` (constant time for fixed-size elements, a walk for strings and arrays).
    pub fn get(&self, i: usize) -> Option<Value<'a>> {
        if i >= self.len {
            return None;
        }
        match self.elem.fixed_size() {
            Some(size) => {
                let mut cursor = Cursor::new(self.bytes.get(i.checked_mul(size)?..)?);
                decode(&mut cursor, self.elem, self.depth).ok()
            }
            None => self.iter().nth(i),
        }
    }

    /// The elements as strings, if they are strings.
    pub fn strings(&self) -> Option<impl Iterator<Item = &'a str> + 'a> {
        (self.elem == ValueType::String).then(|| self.iter().filter_map(|v| v.as_str()))
    }
}

/// Prints the element type and length, not the (possibly huge) elements.
impl core::fmt::Debug for Array<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Array({}; {}, {} bytes)", self.elem, self.len, self.bytes.len())
    }
}

/// Arrays are equal when their element types and encoded elements are.
impl PartialEq for Array<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.elem == other.elem && self.len == other.len && self.bytes == other.bytes
    }
}

impl<'a> IntoIterator for Array<'a> {
    type Item = Value<'a>;
    type IntoIter = ArrayIter<'a>;
    fn into_iter(self) -> ArrayIter<'a> {
        self.iter()
    }
}

impl<'a> IntoIterator for &Array<'a> {
    type Item = Value<'a>;
    type IntoIter = ArrayIter<'a>;
    fn into_iter(self) -> ArrayIter<'a> {
        self.iter()
    }
}

/// The elements of an [`Array`], decoded as they are reached.
#[derive(Clone, Debug)]
pub struct ArrayIter<'a> {
    elem: ValueType,
    depth: usize,
    left: usize,
    cursor: Cursor<'a>,
}

impl<'a> Iterator for ArrayIter<'a> {
    type Item = Value<'a>;

    fn next(&mut self) -> Option<Value<'a>> {
        if self.left == 0 {
            return None;
        }
        match decode(&mut self.cursor, self.elem, self.depth) {
            Ok(v) => {
                self.left -= 1;
                Some(v)
            }
            // The bytes were checked when the file was parsed, so this cannot happen; stop
            // rather than yield garbage if it somehow did.
            Err(_) => {
                self.left = 0;
                None
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for ArrayIter<'_> {}

/// What was wrong with an encoded value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Problem {
    /// The input ended inside the value.
    Short(Short),
    /// A bool byte other than 0 or 1.
    Bool(u8),
    /// A string that is not UTF-8; `valid_up_to` is the length of its valid prefix.
    Utf8 { at: usize, valid_up_to: usize },
    /// An array element type tag that names no type.
    ElemType(u32),
    /// Arrays nested deeper than [`MAX_ARRAY_DEPTH`].
    TooDeep,
    /// An element count that cannot fit in the bytes left.
    TooMany { count: u64, elem: ValueType, left: usize },
}

impl From<Short> for Problem {
    fn from(s: Short) -> Problem {
        Problem::Short(s)
    }
}

/// Reads a GGUF string and checks that it is UTF-8.
pub(crate) fn read_str<'a>(c: &mut Cursor<'a>) -> Result<&'a str, Problem> {
    let bytes = c.string_bytes()?;
    core::str::from_utf8(bytes).map_err(|e| Problem::Utf8 { at: c.pos() - bytes.len(), valid_up_to: e.valid_up_to() })
}

/// Reads a value of type `ty`, checking all of it (an array's every element); `depth` is the
/// number of arrays it sits in.
pub(crate) fn decode<'a>(c: &mut Cursor<'a>, ty: ValueType, depth: usize) -> Result<Value<'a>, Problem> {
    Ok(match ty {
        ValueType::U8 => Value::U8(c.u8()?),
        ValueType::I8 => Value::I8(c.i8()?),
        ValueType::U16 => Value::U16(c.u16()?),
        ValueType::I16 => Value::I16(c.i16()?),
        ValueType::U32 => Value::U32(c.u32()?),
        ValueType::I32 => Value::I32(c.i32()?),
        ValueType::F32 => Value::F32(c.f32()?),
        ValueType::U64 => Value::U64(c.u64()?),
        ValueType::I64 => Value::I64(c.i64()?),
        ValueType::F64 => Value::F64(c.f64()?),
        ValueType::Bool => match c.u8()? {
            0 => Value::Bool(false),
            1 => Value::Bool(true),
            b => return Err(Problem::Bool(b)),
        },
        ValueType::String => Value::String(read_str(c)?),
        ValueType::Array => Value::Array(decode_array(c, depth + 1)?),
    })
}

/// Reads an array header and walks its elements; the array is at nesting level `depth`.
fn decode_array<'a>(c: &mut Cursor<'a>, depth: usize) -> Result<Array<'a>, Problem> {
    if depth > MAX_ARRAY_DEPTH {
        return Err(Problem::TooDeep);
    }
    let tag = c.u32()?;
    let elem = ValueType::from_u32(tag).ok_or(Problem::ElemType(tag))?;
    let count = c.u64()?;
    let left = c.remaining();
    let fits = usize::try_from(count).ok().filter(|n| n.checked_mul(elem.min_size()).is_some_and(|b| b <= left));
    let len = fits.ok_or(Problem::TooMany { count, elem, left })?;
    let start = c.pos();
    match elem.fixed_size() {
        // Every value of a fixed-size type but bool is valid whatever its bytes.
        Some(size) if elem != ValueType::Bool => {
            c.take(len * size)?;
        }
        _ => {
            for _ in 0..len {
                decode(c, elem, depth)?;
            }
        }
    }
    Ok(Array { elem, len, depth, bytes: c.since(start) })
}

#[cfg(test)]
mod tests {
    use alloc::vec;
    use alloc::vec::Vec;

    use super::*;

    fn string(out: &mut Vec<u8>, s: &[u8]) {
        out.extend_from_slice(&(s.len() as u64).to_le_bytes());
        out.extend_from_slice(s);
    }

    fn array_header(out: &mut Vec<u8>, elem: ValueType, count: u64) {
        out.extend_from_slice(&elem.tag().to_le_bytes());
        out.extend_from_slice(&count.to_le_bytes());
    }

    fn decode_all(ty: ValueType, bytes: &[u8]) -> Result<Value<'_>, Problem> {
        let mut c = Cursor::new(bytes);
        let v = decode(&mut c, ty, 0)?;
        assert_eq!(c.remaining(), 0, "{ty} left bytes unread");
        Ok(v)
    }

    #[test]
    fn every_scalar_type_decodes() {
        assert_eq!(decode_all(ValueType::U8, &[200]), Ok(Value::U8(200)));
        assert_eq!(decode_all(ValueType::I8, &[0x80]), Ok(Value::I8(-128)));
        assert_eq!(decode_all(ValueType::U16, &0xbeefu16.to_le_bytes()), Ok(Value::U16(0xbeef)));
        assert_eq!(decode_all(ValueType::I16, &(-300i16).to_le_bytes()), Ok(Value::I16(-300)));
        assert_eq!(decode_all(ValueType::U32, &0xdead_beefu32.to_le_bytes()), Ok(Value::U32(0xdead_beef)));
        assert_eq!(decode_all(ValueType::I32, &i32::MIN.to_le_bytes()), Ok(Value::I32(i32::MIN)));
        assert_eq!(decode_all(ValueType::F32, &0.1f32.to_le_bytes()), Ok(Value::F32(0.1)));
        assert_eq!(decode_all(ValueType::U64, &u64::MAX.to_le_bytes()), Ok(Value::U64(u64::MAX)));
        assert_eq!(decode_all(ValueType::I64, &i64::MIN.to_le_bytes()), Ok(Value::I64(i64::MIN)));
        assert_eq!(
            decode_all(ValueType::F64, &core::f64::consts::PI.to_le_bytes()),
            Ok(Value::F64(core::f64::consts::PI))
        );
        assert_eq!(decode_all(ValueType::Bool, &[0]), Ok(Value::Bool(false)));
        assert_eq!(decode_all(ValueType::Bool, &[1]), Ok(Value::Bool(true)));
        assert_eq!(decode_all(ValueType::Bool, &[2]), Err(Problem::Bool(2)));
        for ty in ValueType::ALL {
            if let Some(size) = ty.fixed_size() {
                let short = vec![0u8; size - 1];
                assert_eq!(decode_all(ty, &short), Err(Problem::Short(Short { at: 0, need: size, left: size - 1 })));
            }
        }
    }

    #[test]
    fn accessors_match_only_their_type() {
        let v = Value::U16(7);
        assert_eq!(v.as_u16(), Some(7));
        assert_eq!(v.as_u32(), None);
        assert_eq!(v.as_unsigned(), Some(7));
        assert_eq!(v.as_integer(), Some(7));
        assert_eq!(v.value_type(), ValueType::U16);
        assert_eq!(Value::I8(-3).as_integer(), Some(-3));
        assert_eq!(Value::I8(-3).as_unsigned(), None);
        assert_eq!(Value::U64(u64::MAX).as_integer(), None);
        assert_eq!(Value::F32(1.0).as_integer(), None);
        assert_eq!(Value::String("x").as_str(), Some("x"));
        assert_eq!(Value::Bool(true).as_bool(), Some(true));
    }

    #[test]
    fn strings_borrow_and_must_be_utf8() {
        let mut bytes = Vec::new();
        string(&mut bytes, "héllo".as_bytes());
        let v = decode_all(ValueType::String, &bytes).unwrap();
        let s = v.as_str().unwrap();
        assert_eq!(s, "héllo");
        assert_eq!(s.as_ptr(), bytes[8..].as_ptr(), "strings are not copied");

        let mut bad = Vec::new();
        string(&mut bad, &[b'a', 0xff, b'b']);
        assert_eq!(decode_all(ValueType::String, &bad), Err(Problem::Utf8 { at: 8, valid_up_to: 1 }));

        let mut short = Vec::new();
        string(&mut short, b"abc");
        short.pop();
        assert!(matches!(decode_all(ValueType::String, &short), Err(Problem::Short(_))));

        let mut empty = Vec::new();
        string(&mut empty, b"");
        assert_eq!(decode_all(ValueType::String, &empty), Ok(Value::String("")));
    }

    #[test]
    fn arrays_of_scalars_iterate_lazily() {
        let mut bytes = Vec::new();
        array_header(&mut bytes, ValueType::I16, 3);
        for v in [-1i16, 2, 300] {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        let v = decode_all(ValueType::Array, &bytes).unwrap();
        let a = v.as_array().unwrap();
        assert_eq!(a.elem_type(), ValueType::I16);
        assert_eq!(a.len(), 3);
        assert_eq!(a.raw_bytes().as_ptr(), bytes[12..].as_ptr());
        let items: Vec<_> = a.iter().collect();
        assert_eq!(items, [Value::I16(-1), Value::I16(2), Value::I16(300)]);
        assert_eq!(a.iter().len(), 3);
        assert_eq!(a.get(2), Some(Value::I16(300)));
        assert_eq!(a.get(3), None);
        assert!(a.strings().is_none());
    }

    #[test]
    fn arrays_of_strings_and_bools_check_every_element() {
        let mut bytes = Vec::new();
        array_header(&mut bytes, ValueType::String, 3);
        for s in ["a", "", "ccc"] {
            string(&mut bytes, s.as_bytes());
        }
        let v = decode_all(ValueType::Array, &bytes).unwrap();
        let a = v.as_array().unwrap();
        assert_eq!(a.strings().unwrap().collect::<Vec<_>>(), ["a", "", "ccc"]);
        assert_eq!(a.get(2), Some(Value::String("ccc")));

        let mut bools = Vec::new();
        array_header(&mut bools, ValueType::Bool, 3);
        bools.extend_from_slice(&[1, 0, 1]);
        let v = decode_all(ValueType::Array, &bools).unwrap();
        assert_eq!(
            v.as_array().unwrap().iter().collect::<Vec<_>>(),
            [Value::Bool(true), Value::Bool(false), Value::Bool(true)]
        );
        bools[13] = 9;
        assert_eq!(decode_all(ValueType::Array, &bools), Err(Problem::Bool(9)));
    }

    #[test]
    fn nested_arrays_decode_and_depth_is_capped() {
        // [[1u32, 2u32], [], [3u32]]
        let mut bytes = Vec::new();
        array_header(&mut bytes, ValueType::Array, 3);
        array_header(&mut bytes, ValueType::U32, 2);
        bytes.extend_from_slice(&1u32.to_le_bytes());
        bytes.extend_from_slice(&2u32.to_le_bytes());
        array_header(&mut bytes, ValueType::U32, 0);
        array_header(&mut bytes, ValueType::U32, 1);
        bytes.extend_from_slice(&3u32.to_le_bytes());
        let v = decode_all(ValueType::Array, &bytes).unwrap();
        let outer = v.as_array().unwrap();
        let inner: Vec<Vec<u32>> =
            outer.iter().map(|v| v.as_array().unwrap().iter().map(|x| x.as_u32().unwrap()).collect()).collect();
        assert_eq!(inner, [vec![1, 2], vec![], vec![3]]);
        assert_eq!(outer.get(2).and_then(|v| v.as_array()).map(|a| a.len()), Some(1));

        let nested = |depth: usize| {
            let mut bytes = Vec::new();
            for _ in 1..depth {
                array_header(&mut bytes, ValueType::Array, 1);
            }
            array_header(&mut bytes, ValueType::U8, 1);
            bytes.push(42);
            bytes
        };
        let ok = nested(MAX_ARRAY_DEPTH);
        let mut v = decode_all(ValueType::Array, &ok).unwrap();
        for _ in 1..MAX_ARRAY_DEPTH {
            v = v.as_array().unwrap().get(0).unwrap();
        }
        assert_eq!(v.as_array().unwrap().get(0), Some(Value::U8(42)));
        assert_eq!(decode_all(ValueType::Array, &nested(MAX_ARRAY_DEPTH + 1)), Err(Problem::TooDeep));
    }

    #[test]
    fn absurd_counts_and_bad_element_types_are_rejected_up_front() {
        let mut bytes = Vec::new();
        array_header(&mut bytes, ValueType::U64, u64::MAX);
        bytes.extend_from_slice(&[0; 16]);
        assert_eq!(
            decode_all(ValueType::Array, &bytes),
            Err(Problem::TooMany { count: u64::MAX, elem: ValueType::U64, left: 16 })
        );

        // Three strings need at least 24 bytes even if all are empty.
        let mut strings = Vec::new();
        array_header(&mut strings, ValueType::String, 3);
        strings.extend_from_slice(&[0; 23]);
        assert!(matches!(decode_all(ValueType::Array, &strings), Err(Problem::TooMany { count: 3, .. })));

        let mut bad = Vec::new();
        bad.extend_from_slice(&13u32.to_le_bytes());
        bad.extend_from_slice(&0u64.to_le_bytes());
        assert_eq!(decode_all(ValueType::Array, &bad), Err(Problem::ElemType(13)));
    }
}
